#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What rows that take the fused path's exact fallback cost a prefill call, through the bench
shim (one or more builds, in alternation).

A query row of zeros scores 0 against every key: all its keys tie, all pass any gate, and its
candidates overflow, so the row falls back to the dense pair (the padding rows of a batch look
like this). Each case zeroes N rows spread over the chunk (--fallback-rows) of random
causal-suffix inputs (H = 64 or --heads, 4096 x 131072 or --rows / --width, k = 2048, unsorted),
times the fused and the dense path (CUDA-graph replay of one call, median of --iters, us) and
checks that both give the same sets.

    python3 -m dev.tuning.fallback_cost old/libflashindexer_bench_shim.so \\
        build/libflashindexer_bench_shim.so [--fallback-rows 0,1,8,64]
"""
import argparse

import torch

from bench.inputs import PrefillInputs
from bench.timing import capture_graph, event_median_ms
from dev.ab.shim import K, load_shim, prefill_call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shims", nargs="+")
    parser.add_argument("--heads", type=int, default=64)
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--width", type=int, default=131072)
    parser.add_argument("--fallback-rows", default="0,1,8,64",
                        help="comma-separated numbers of zero query rows")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    libs = [(path.split("/")[-1], load_shim(path)) for path in args.shims]
    workspace = torch.empty(libs[0][1].fi_indexer_workspace_size(K), dtype=torch.uint8,
                            device="cuda")
    inputs = PrefillInputs(args.heads, args.rows, args.width)
    random_q = inputs.q.clone()
    counts = [int(n) for n in args.fallback_rows.split(",")]
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; H{args.heads} "
          f"{args.rows}x{args.width}, k = {K}, unsorted; us per call, median of {args.iters}\n")
    print("| round | build | " + " | ".join(f"{n} zero rows {p}" for n in counts
                                            for p in ("fused", "dense")) + " |")
    print("|---|---|" + "---:|" * (2 * len(counts)))
    for round_index in range(args.rounds):
        for shim_name, lib in libs:
            times = []
            for n in counts:
                inputs.q.copy_(random_q)
                if n > 0:
                    zero = torch.linspace(0, args.rows - 1, n, device="cuda").long()
                    inputs.q.view(torch.uint8)[zero] = 0  # e4m3 +0
                got = {}
                for path in (2, 1):  # fused, dense
                    out = torch.empty(args.rows, K, dtype=torch.int32, device="cuda")
                    call = prefill_call(lib, inputs, out, path, workspace)
                    call()
                    torch.cuda.synchronize()
                    got[path] = out.sort(dim=1).values
                    graph = capture_graph(call)
                    times.append(event_median_ms(graph.replay, args.iters) * 1e3)
                assert torch.equal(got[1], got[2]), f"{shim_name}, {n} zero rows: paths differ"
            print(f"| {round_index} | {shim_name} | " + " | ".join(f"{t:.1f}" for t in times)
                  + " |", flush=True)


if __name__ == "__main__":
    main()
