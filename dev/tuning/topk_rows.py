#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""topk_per_row over few long rows (the decode form), swept over the row count: the cluster
kernel's sizes and waves show up as steps between neighbouring counts.

Calls the C++ op through the bench shim (ctypes) on [rows, --width] fp32 N(0,1) logits, k = --k,
unsorted and sorted. Times: CUDA-graph replay of 10 calls, warm L2, the best of three medians of
10 replays, us per call.

    python3 -m dev.tuning.topk_rows --shim build/libflashindexer_bench_shim.so
"""
import argparse

import torch

from bench.timing import capture_graph, event_median_ms
from dev.ab.shim import load_shim, make_call

ROWS = "8,12,14,16,17,20,24,26,27,28,29,30,32,33,36,40,44,48,56,64,66"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    parser.add_argument("--rows", default=ROWS, help="comma-separated row counts")
    parser.add_argument("--width", type=int, default=131072)
    parser.add_argument("--k", type=int, default=2048)
    args = parser.parse_args()
    lib = load_shim(args.shim)
    print(f"GPU: {torch.cuda.get_device_name()}; [rows, {args.width}] fp32, k = {args.k}, "
          "us per call\n")
    print("| rows | unsorted us | sorted us |\n|---:|---:|---:|")
    for rows in (int(r) for r in args.rows.split(",")):
        logits = torch.randn(rows, args.width, device="cuda")
        times = []
        for sorted_output in (False, True):
            out = torch.empty(rows, args.k, dtype=torch.int32, device="cuda")
            call = make_call(lib, logits, out, args.k, "decode", sorted_output)
            call()
            torch.cuda.synchronize()
            graph = capture_graph(call, 10)
            times.append(min(event_median_ms(graph.replay, 10) for _ in range(3)) / 10 * 1e3)
        print(f"| {rows} | {times[0]:.1f} | {times[1]:.1f} |", flush=True)


if __name__ == "__main__":
    main()
