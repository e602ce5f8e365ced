#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU time per kernel of one V4.1 consumer layer (H 32, k 512, cb 8, C 2048), on its dense-masked
and its sparse path, with the step's sparse rows built in the call and prebuilt, through the
installed module. torch.profiler (CUPTI) records the kernels of 5 replays of a CUDA graph of the
call; each kernel's time and launches are given per call, with the call's span.

    python3 -m dev.probes.profile_consumer [--prefill-rows 4096] [--decode-batch 64]
        [--width 131072] [--calls 1] [--paths dense,sparse,prebuilt] [--no-times]

(--no-times: the calls alone, for ncu, which takes CUPTI from torch.profiler.)
"""
import argparse

import torch

from bench.inputs import DecodeInputs, PrefillInputs
from bench.routines.candidates import C, CB, HEADS, K, published_candidates
from bench.timing import capture_graph
from dev.probes.profile_indexer import kernel_times


def main():
    import flashindexer as fi

    parser = argparse.ArgumentParser()
    parser.add_argument("--prefill-rows", type=int, default=4096, help="0: no prefill case")
    parser.add_argument("--decode-batch", type=int, default=64, help="0: no decode case")
    parser.add_argument("--width", type=int, default=131072, help="keys per request")
    parser.add_argument("--calls", type=int, default=1, help="calls per graph")
    parser.add_argument("--paths", default="dense,sparse,prebuilt",
                        help="which of dense, sparse, prebuilt (sparse, the rows built once)")
    parser.add_argument("--no-times", action="store_true", help="run the calls, time nothing")
    args = parser.parse_args()
    workspace = torch.empty(fi.indexer_cuda_workspace_size(K), dtype=torch.uint8, device="cuda")
    cases = []  # (name, rows, blocks, layer(out, path, step_rows), build(step_rows))
    if args.prefill_rows:
        p = PrefillInputs(HEADS, args.prefill_rows, args.width, "suffix")
        blocks = published_candidates((p.ke - p.ks).long())
        cases.append((f"prefill {args.prefill_rows}x{args.width}", args.prefill_rows, blocks,
                      lambda out, path, rows, p=p, b=blocks: fi.indexer_prefill(
                          p.q, (p.keys, p.kscale), p.weights, p.ks, p.ke, K, out=out,
                          workspace=workspace, candidates=b, candidate_block_size=CB,
                          path=path, candidate_rows=rows),
                      lambda rows, p=p, b=blocks: fi.build_sparse_consumer_rows_prefill(
                          b, CB, p.ks, p.ke, args.width, out=rows)))
    if args.decode_batch:
        d = DecodeInputs(HEADS, args.decode_batch, args.width)
        cache = fi.PagedKCache(d.cache, d.page, 128, "fp8")
        blocks = published_candidates(d.lens2d.reshape(-1).long())
        cases.append((f"decode {args.decode_batch}x{args.width}", args.decode_batch, blocks,
                      lambda out, path, rows, d=d, b=blocks, c=cache: fi.indexer_decode(
                          d.q, c, d.weights, d.lens, d.table, K, out=out, workspace=workspace,
                          candidates=b, candidate_block_size=CB, path=path,
                          candidate_rows=rows),
                      lambda rows, d=d, b=blocks, c=cache: fi.build_sparse_consumer_rows_decode(
                          b, CB, d.lens, d.table, 1, c, out=rows)))
    for name, rows, blocks, layer, build in cases:
        step_rows = torch.empty(fi.sparse_consumer_rows_size(rows, C, CB), dtype=torch.uint8,
                                device="cuda")
        build(step_rows)
        wanted = args.paths.split(",")
        for path, prebuilt in (("dense", None), ("sparse", None), ("sparse", step_rows)):
            if (path if prebuilt is None else "prebuilt") not in wanted:
                continue
            out = torch.empty(rows, K, dtype=torch.int32, device="cuda")
            graph = capture_graph(lambda: layer(out, path, prebuilt), args.calls)
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            if args.no_times:
                continue
            span, times = kernel_times(graph, args.calls)
            label = f"{name} {path}{', rows prebuilt' if prebuilt is not None else ''}"
            print(f"{label}: {span:.1f} us per call")
            for kernel, (launches, us) in times.items():
                print(f"    {kernel[-90:]:90s} x{launches:.1f} {us:8.1f} us")


if __name__ == "__main__":
    main()
