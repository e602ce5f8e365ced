#!/usr/bin/env python3
"""What one eager call costs, against the same call in a CUDA graph: decode (H = 64, page 64,
next_n 1, 131072 keys, k = 2048) at batch 1 and 64 through the Python module on torch tensors.

Per op and batch: the graph replay time per call (the GPU's time), the host time of an eager
call (its Python binding, argument checks, launches; measured while the GPU queue is not full,
which it is not for the first calls after a sync), and eager calls back to back (whichever of
the two is longer sets the rate). --split: where the host time of a batch-1
paged_mqa_logits call goes (the Python layer, _C with its arguments prepared, and the PyTorch
calls a binding might make per tensor). Run with the flashindexer package on PYTHONPATH:

    python3 tools/bench/call_overhead.py [--split]
"""
import argparse
import time

import torch

import flashindexer as fi
from flashindexer import _C
from flashindexer._tensors import raw, stream_handle
from bench_logits import DecodeInputs
from cuda_timing import capture_graph, event_median_ms

K, WIDTH, CALLS = 2048, 131072, 20


def host_us(call, calls=CALLS):
    """Median host time of `calls` eager calls issued right after a sync (us)."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def eager_us(call, calls=200):
    """Eager calls back to back, to the last one's completion (us per call)."""
    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us(call):
    graph = capture_graph(call, CALLS)
    return min(event_median_ms(graph.replay, 10) for _ in range(3)) / CALLS * 1e3


def best_us(fn, calls=2000):
    """The best of 5 means over `calls` back-to-back host calls of `fn` (us)."""
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return best


def split():
    inputs = DecodeInputs(64, 1, WIDTH, 1, False)
    cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
    lens = inputs.lens.to(device="cuda", dtype=torch.int32)
    logits = torch.empty(1, inputs.width, device="cuda")
    q, weights = inputs.q, inputs.weights
    prepared = (raw(logits), raw(q), None, cache, raw(weights), raw(lens), raw(inputs.table), False,
                stream_handle(None, [weights]), 0)
    parts = [
        ("paged_mqa_logits, the whole call", lambda: fi.paged_mqa_logits(
            q, cache, weights, lens, inputs.table, clean=False, out=logits), 200),
        ("_C.paged_mqa_logits, arguments prepared", lambda: _C.paged_mqa_logits(*prepared), 200),
        ("raw(q) (e4m3)", lambda: raw(q), 2000),
        ("stream_handle", lambda: stream_handle(None, [weights]), 2000),
        ("torch.cuda.current_stream()", torch.cuda.current_stream, 2000),
        ("q.view(torch.uint8)", lambda: q.view(torch.uint8), 2000),
        ("weights.__dlpack__()", weights.__dlpack__, 2000),
        ("weights.data_ptr()", weights.data_ptr, 2000),
        ("weights shape, stride(), dtype, device",
         lambda: (weights.shape, weights.stride(), weights.dtype, weights.device), 2000),
    ]
    print("| part | host us |\n|---|---:|")
    for name, fn, calls in parts:
        print(f"| {name} | {best_us(fn, calls):.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", action="store_true")
    if parser.parse_args().split:
        split()
        return
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; H = 64, next_n 1, "
          f"{WIDTH} keys, k = {K}; us per call\n")
    print("| op | batch | graph replay | eager host | eager back to back |\n"
          "|---|---:|---:|---:|---:|")
    workspace = torch.empty(fi.indexer_cuda_workspace_size(K), dtype=torch.uint8, device="cuda")
    for batch in (1, 64):
        inputs = DecodeInputs(64, batch, WIDTH, 1, False)
        cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
        lens = inputs.lens.to(device="cuda", dtype=torch.int32)
        logits = torch.empty(batch, inputs.width, device="cuda")
        out = torch.empty(batch, K, dtype=torch.int32, device="cuda")
        topk_workspace = torch.empty(fi.topk_per_row_cuda_workspace_size(batch, inputs.width, K),
                                     dtype=torch.uint8, device="cuda")
        calls = {
            "indexer_decode": lambda: fi.indexer_decode(
                inputs.q, cache, inputs.weights, lens, inputs.table, K, out=out,
                workspace=workspace),
            "paged_mqa_logits": lambda: fi.paged_mqa_logits(
                inputs.q, cache, inputs.weights, lens, inputs.table, clean=False, out=logits),
            "topk_per_row": lambda: fi.topk_per_row(logits, K, lengths=lens, out=out,
                                                    workspace=topk_workspace),
        }
        for name, call in calls.items():
            call()
            torch.cuda.synchronize()
            print(f"| {name} | {batch} | {graph_us(call):.1f} | {host_us(call):.1f} | "
                  f"{eager_us(call):.1f} |", flush=True)


if __name__ == "__main__":
    main()
