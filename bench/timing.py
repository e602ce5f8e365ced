# SPDX-License-Identifier: Apache-2.0
"""Timers of the benchmark: CUDA events around eager calls or CUDA-graph replays on the GPU,
perf_counter on the CPU; warm-up, median of N, an L2 flush between timed calls.

PyTorch is imported when a GPU timer first runs, so that the CPU routine (and the baseline
script of `flashindexer bench`, which imports this module beside it) needs only NumPy.
"""
import statistics
import time


def _torch():
    import torch

    return torch


def event_median_ms(fn, iters, warmup=3, before=None):
    """Median GPU time of fn() in ms over `iters` CUDA-event-timed calls after `warmup` untimed
    ones; before(), when given, runs ahead of every call outside the timed region (an L2 flush)."""
    torch = _torch()
    times = []
    for i in range(iters + warmup):
        if before is not None:
            before()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def capture_graph(fn, calls=1):
    """A CUDA graph of `calls` calls of fn(), captured after one warm-up call on a side stream."""
    torch = _torch()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def warm_up(fn, warm_ms):
    """Calls fn() back to back for warm_ms of wall time, so that the next measurement sees the
    clocks and board power of sustained load (an H200 under FP8 tensor load settles at its 700 W
    limit within tens of ms, its SM clock dropping from 1.98 GHz to ~1.4-1.7 GHz)."""
    if warm_ms <= 0:
        return
    torch = _torch()
    one_ms = max(event_median_ms(fn, 1, warmup=1), 1e-3)
    chunk = max(1, int(10 / one_ms))  # ~10 ms of work per host synchronisation
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < warm_ms:
        for _ in range(chunk):
            fn()
        torch.cuda.synchronize()


def graph_ms(fn, batch, iters, warm_ms=0, before=None):
    """GPU time of one call: a CUDA graph of `batch` calls, median of `iters` replays (after
    warm_ms of replays, when given; before() ahead of every replay, untimed)."""
    graph = capture_graph(fn, batch)
    warm_up(graph.replay, warm_ms)
    return event_median_ms(graph.replay, iters, warmup=2, before=before) / batch


class L2Flush:
    """A 256 MiB buffer whose zeroing evicts the H200's 50 MiB L2 between timed calls, so that a
    call reads its inputs from HBM as it would in a model step."""

    def __init__(self, device="cuda"):
        torch = _torch()
        self.buffer = torch.empty(256 << 20, dtype=torch.uint8, device=device)

    def __call__(self):
        self.buffer.zero_()


def cpu_median_ms(fn, repeats, warmup=1):
    """Median wall time of fn() in ms over `repeats` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)
