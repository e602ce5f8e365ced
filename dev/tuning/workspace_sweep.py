#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""indexer_prefill on CUDA (fused and dense paths) against the size of its logits slab.

The indexer's workspace is the top-k scratch plus a logits slab (indexer_cuda_workspace_size(k)
recommends 256 MiB of slab). The slab sets how many rows run per batch (the dense path's
scoring + top-k pairs, the fused path's sample / gate / scan / select batches) and how many
fallback launch pairs the fused path queues (empty when no row falls back, but each costs its
launch), so a larger slab trades memory for fewer kernel tails and launches. Per case the slab
sizes run in alternation, --rounds times, each a CUDA graph of one call (median of --iters
replays, ms), and every size's answer must equal the recommended size's answer bit for bit.

  python3 -m dev.tuning.workspace_sweep [--slabs-mib 256,384,512] [--rounds 2] [--iters 5]
"""
import argparse

import torch

import flashindexer as fi
from bench.cases import K, selected
from bench.inputs import PrefillInputs
from bench.timing import graph_ms
from dev.ab.shim import add_only_argument

MIB = 1 << 20
RECOMMENDED_SLAB_MIB = 256

# name, H, rows, keys
CASES = [
    ("H32 4096x131072", 32, 4096, 131072),
    ("H64 4096x131072", 64, 4096, 131072),
    ("H32 2048x262144", 32, 2048, 262144),
    ("H64 2048x262144", 64, 2048, 262144),
]


def workspace_of(slab_mib, k):
    """A workspace whose slab is slab_mib MiB: the recommended size with its slab resized."""
    size = fi.indexer_cuda_workspace_size(k) + (slab_mib - RECOMMENDED_SLAB_MIB) * MIB
    return torch.empty(size, dtype=torch.uint8, device="cuda")


def sweep(case, slabs, rounds, iters, k):
    name, heads, rows, keys = case
    inputs = PrefillInputs(heads, rows, keys)
    workspaces = {mib: workspace_of(mib, k) for mib in slabs}

    def run(path, mib, out=None):
        return fi.indexer_prefill(inputs.q, (inputs.keys, inputs.kscale), inputs.weights,
                                  inputs.ks, inputs.ke, k, sorted=True, out=out,
                                  workspace=workspaces[mib], path=path)

    expected = run("dense", RECOMMENDED_SLAB_MIB)
    for path in ("fused", "dense"):
        for mib in slabs:
            got = run(path, mib)
            assert torch.equal(got, expected), f"{name}: {path} with a {mib} MiB slab differs"
    out = torch.empty_like(expected)
    times = {(path, mib): [] for path in ("fused", "dense") for mib in slabs}
    for _ in range(rounds):
        for mib in slabs:
            for path in ("fused", "dense"):
                times[(path, mib)].append(
                    graph_ms(lambda p=path, m=mib: run(p, m, out=out), 1, iters))
    for path in ("fused", "dense"):
        cells = " | ".join(" / ".join(f"{t:.3f}" for t in times[(path, mib)]) for mib in slabs)
        print(f"| {name} | {path} | {cells} |", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--slabs-mib", default="256,384,512",
                        help="logits slab sizes to compare, MiB (the first is the baseline)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--k", type=int, default=K)
    add_only_argument(parser)
    args = parser.parse_args()
    slabs = [int(s) for s in args.slabs_mib.split(",")]
    if RECOMMENDED_SLAB_MIB not in slabs:
        parser.error(f"--slabs-mib must include the recommended {RECOMMENDED_SLAB_MIB} MiB")
    print(f"k = {args.k}, ms per call, rounds separated by /")
    print("| case | path | " + " | ".join(f"slab {mib} MiB" for mib in slabs) + " |")
    print("|---|---|" + "---:|" * len(slabs))
    for case in CASES:
        if selected(args.only, case[0]):
            sweep(case, slabs, args.rounds, args.iters, args.k)


if __name__ == "__main__":
    main()
