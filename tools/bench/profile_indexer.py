#!/usr/bin/env python3
"""GPU time per kernel of one indexer_decode call, dense and fused, through the bench shim.

torch.profiler (CUPTI) records the kernels of 5 replays of a CUDA graph of 10 calls (H = 64,
page 64, next_n 1, 131072 keys, k = 2048, batch 1 and 64, unsorted and sorted); each kernel
instantiation's time and launches are given per call, with the call's span.

    python3 tools/bench/profile_indexer.py --shim build/libflashindexer_bench_shim.so
"""
import argparse
import collections

import torch

from bench_logits import DecodeInputs
from compare_builds import K, WIDTH, indexer_call, load_shim
from cuda_timing import capture_graph

CALLS, REPLAYS = 10, 5


def kernel_times(graph):
    """(span per call, {kernel: (launches, us)} per call) over REPLAYS replays of `graph`."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = CALLS * REPLAYS
    times = collections.OrderedDict()
    for event in sorted(kernels, key=lambda e: e.time_range.start):
        name = event.name.split("(")[0].replace("flashindexer::cuda::", "")
        launches, us = times.get(name, (0, 0.0))
        times[name] = (launches + 1, us + event.time_range.elapsed_us())
    span = (max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels))
    return span / per_call, {name: (n / per_call, us / per_call) for name, (n, us) in times.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    args = parser.parse_args()
    lib = load_shim(args.shim)
    workspace = torch.empty(lib.fi_indexer_workspace_size(K), dtype=torch.uint8, device="cuda")
    for batch in (1, 64):
        inputs = DecodeInputs(64, batch, WIDTH, 1, False)
        for path, path_name in ((1, "dense"), (2, "fused")):
            for sorted_output in (False, True):
                out = torch.empty(batch, K, dtype=torch.int32, device="cuda")
                call = indexer_call(lib, inputs, batch, out, sorted_output, path, workspace)
                graph = capture_graph(call, CALLS)
                for _ in range(20):
                    graph.replay()
                torch.cuda.synchronize()
                span, times = kernel_times(graph)
                print(f"b{batch} {path_name}{' sorted' if sorted_output else ''}: "
                      f"{span:.1f} us per call")
                for name, (launches, us) in times.items():
                    print(f"    {name[-70:]:70s} x{launches:.1f} {us:7.1f} us")


if __name__ == "__main__":
    main()
