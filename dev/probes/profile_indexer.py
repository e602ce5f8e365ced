#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU time per kernel of one indexer_decode call, dense and fused, through the bench shim.

torch.profiler (CUPTI) records the kernels of 5 replays of a CUDA graph of 10 calls (H = 64 or
--heads, page 64, next_n 1 or --next-n, 131072 keys or --width, k = 2048, batch 1 and 64 or
--batches, unsorted and sorted), and with --prefill-rows of a graph of one indexer_prefill call (H = 64 and
32, causal-suffix rows, 131072 keys or --prefill-width, unsorted); each kernel instantiation's
time and launches are given per call, with the call's span.

    python3 -m dev.probes.profile_indexer --shim build/libflashindexer_bench_shim.so \
        [--batches 1,64] [--next-n 1] [--width 131072] [--prefill-rows 2048]
        [--prefill-width 131072]
"""
import argparse
import collections

import torch

from bench.inputs import DecodeInputs, PrefillInputs
from bench.timing import capture_graph
from dev.ab.shim import K, WIDTH, indexer_call, load_shim, prefill_call

CALLS, REPLAYS = 10, 5


def kernel_times(graph, calls):
    """(span per call, {kernel: (launches, us)} per call) over REPLAYS replays of `graph`, a
    graph of `calls` calls."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(REPLAYS):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in profile.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    per_call = calls * REPLAYS
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
    parser.add_argument("--batches", default="1,64", help="comma-separated decode batch sizes")
    parser.add_argument("--next-n", type=int, default=1, help="decode rows per request (1-4)")
    parser.add_argument("--heads", type=int, default=64, choices=(32, 64), help="decode H")
    parser.add_argument("--width", type=int, default=WIDTH, help="decode keys per request")
    parser.add_argument("--prefill-rows", type=int, default=0,
                        help="also indexer_prefill of this many causal-suffix rows (H = 64, 32)")
    parser.add_argument("--prefill-width", type=int, default=WIDTH, help="prefill keys")
    args = parser.parse_args()
    lib = load_shim(args.shim)
    workspace = torch.empty(lib.fi_indexer_workspace_size(K), dtype=torch.uint8, device="cuda")
    cases = []  # (name, rows, make(out, path) -> call, calls per graph)
    for batch in (int(b) for b in args.batches.split(",")):
        inputs = DecodeInputs(args.heads, batch, args.width, args.next_n, False)
        rows = batch * args.next_n
        for sorted_output in (False, True):
            cases.append((f"H{args.heads} b{batch}x{args.width} next_n {args.next_n}", rows,
                          sorted_output, CALLS,
                          lambda out, path, i=inputs, b=batch, s=sorted_output:
                          indexer_call(lib, i, b, out, s, path, workspace, args.next_n)))
    if args.prefill_rows > 0:
        for heads in (64, 32):
            inputs = PrefillInputs(heads, args.prefill_rows, args.prefill_width)
            cases.append((f"prefill H{heads} {args.prefill_rows}x{args.prefill_width}",
                          args.prefill_rows,
                          False, 1, lambda out, path, i=inputs:
                          prefill_call(lib, i, out, path, workspace)))
    for name, rows, sorted_output, calls, make in cases:
        for path, path_name in ((1, "dense"), (2, "fused")):
            out = torch.empty(rows, K, dtype=torch.int32, device="cuda")
            graph = capture_graph(make(out, path), calls)
            for _ in range(20 if calls > 1 else 3):
                graph.replay()
            torch.cuda.synchronize()
            span, times = kernel_times(graph, calls)
            print(f"{name} {path_name}{' sorted' if sorted_output else ''}: "
                  f"{span:.1f} us per call")
            for kernel, (launches, us) in times.items():
                print(f"    {kernel[-70:]:70s} x{launches:.1f} {us:7.1f} us")


if __name__ == "__main__":
    main()
