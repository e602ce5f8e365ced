#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Dense against fused indexer_decode on the same inputs, interleaved: the data for the dispatch
rule between the two paths.

For each decode shape (--heads x --batches x --widths x --next-n, page 64, equal lengths,
k = --k) it captures CUDA graphs of --calls calls of both paths, unsorted and sorted, checks
that both paths give the same indices, then times every graph in --rounds rounds, each round
in a rotated order, so that drift in clocks or temperature over a run reaches every graph
alike (timing the cases one after the other, a path measured later in a run read up to 10 %
slower at 128-256 x 131072 keys). Prints the median us per call of each graph over the rounds,
its range, and fused / dense.

    python3 -m dev.tuning.path_crossover --shim build/libflashindexer_bench_shim.so \\
        --batches 64,128,256 --widths 65536,131072

--prefill ROWSxKEYS[/R],...: indexer_prefill instead (causal-suffix rows, one call per graph;
/R: a chunk of R equal requests, each row seeing KEYS / R keys at most).
"""
import argparse
import statistics

import torch

from bench.inputs import DecodeInputs, PrefillInputs
from bench.timing import capture_graph, event_median_ms
from dev.ab.shim import indexer_call, load_shim, prefill_call


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    parser.add_argument("--heads", default="64", help="comma-separated H")
    parser.add_argument("--batches", default="64,128,256", help="comma-separated requests")
    parser.add_argument("--widths", default="131072", help="comma-separated context lengths")
    parser.add_argument("--next-n", default="1", help="comma-separated next_n")
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--calls", type=int, default=5, help="calls per captured graph")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--iters", type=int, default=5, help="timed replays per graph per round")
    parser.add_argument("--prefill", default="",
                        help="comma-separated prefill shapes ROWSxKEYS or ROWSxKEYS/REQUESTS "
                        "(replaces the decode ones)")
    args = parser.parse_args()
    lib = load_shim(args.shim)
    workspace = torch.empty(lib.fi_indexer_workspace_size(args.k), dtype=torch.uint8,
                            device="cuda")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; k = {args.k}, "
          f"us per call: median over {args.rounds} rotated rounds of the median of "
          f"{args.iters} replays of a graph of {args.calls} calls (prefill: 1) (range over the "
          "rounds)\n")
    print("| H | requests x keys | next_n | order | dense | fused | fused / dense |")
    print("|---:|---|---:|---|---:|---:|---:|")
    for heads in (int(h) for h in args.heads.split(",")):
        if args.prefill:
            for shape in args.prefill.split(","):
                size, _, requests = shape.partition("/")
                rows, width = (int(x) for x in size.split("x"))
                requests = int(requests or 1)
                inputs = PrefillInputs(heads, rows, width, requests=requests)
                chunk = f" in {requests} requests" if requests > 1 else ""
                compare_paths(args, f"| {heads} | prefill {rows} x {width}{chunk} | - |", rows, 1,
                              lambda out, sorted_output, path, inputs=inputs: prefill_call(
                                  lib, inputs, out, path, workspace, args.k, sorted_output))
                del inputs
                torch.cuda.empty_cache()
            continue
        for next_n in (int(n) for n in args.next_n.split(",")):
            for width in (int(w) for w in args.widths.split(",")):
                for batch in (int(b) for b in args.batches.split(",")):
                    inputs = DecodeInputs(heads, batch, width, next_n, False)
                    compare_paths(args, f"| {heads} | {batch} x {width} | {next_n} |",
                                  batch * next_n, args.calls,
                                  lambda out, sorted_output, path, inputs=inputs: indexer_call(
                                      lib, inputs, batch, out, sorted_output, path, workspace,
                                      next_n, args.k))
                    del inputs
                    torch.cuda.empty_cache()


def compare_paths(args, label, rows, calls, make_call):
    """Both paths of one shape, unsorted and sorted: checked equal, then timed in rotated rounds
    (graphs of `calls` calls); prints a table row per order."""
    graphs = {}
    for sorted_output in (False, True):
        answers = []
        for path, name in ((1, "dense"), (2, "fused")):
            out = torch.empty(rows, args.k, dtype=torch.int32, device="cuda")
            call = make_call(out, sorted_output, path)
            call()
            torch.cuda.synchronize()
            answers.append(out.clone() if sorted_output else out.sort(dim=1).values)
            graphs[(sorted_output, name)] = (capture_graph(call, calls), out)
        assert torch.equal(answers[0], answers[1]), f"{label}: the paths differ"
    keys = list(graphs)
    times = {key: [] for key in keys}
    for r in range(args.rounds):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            graph = graphs[key][0]
            times[key].append(event_median_ms(graph.replay, args.iters) / calls * 1e3)
    for sorted_output in (False, True):
        dense = times[(sorted_output, "dense")]
        fused = times[(sorted_output, "fused")]
        ratio = statistics.median(fused) / statistics.median(dense)
        print(f"{label} {'sorted' if sorted_output else 'unsorted'} | "
              f"{statistics.median(dense):.1f} ({min(dense):.1f}-{max(dense):.1f}) | "
              f"{statistics.median(fused):.1f} ({min(fused):.1f}-{max(fused):.1f}) | "
              f"{ratio:.3f} |", flush=True)


if __name__ == "__main__":
    main()
