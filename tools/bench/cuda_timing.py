"""CUDA-event timing shared by the GPU benchmark scripts of tools/bench/ (PyTorch streams)."""
import statistics

import torch


def event_median_ms(fn, iters, warmup=3, before=None):
    """Median GPU time of fn() in ms over `iters` CUDA-event-timed calls after `warmup` untimed
    ones; before(), when given, runs ahead of every call outside the timed region (an L2 flush)."""
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
