# SPDX-License-Identifier: Apache-2.0
"""Runs the memory-bound ops before the scoring (query quantization with and without RoPE,
insert_k_cache, gather_k_workspace) on the benchmark's shapes, a few calls each and nothing else,
so that a profiler sees only them: where does each kernel stand against the DRAM bandwidth, and
what stalls its warps?

    ncu --section SpeedOfLight --section Occupancy --section WarpStateStats \
        python3 -m dev.probes.profile_quantizers [--only NAME]

Uses the installed `flashindexer` module and PyTorch with CUDA.
"""
import argparse

import torch

from bench.routines.query import query_inputs

D = 128
PAGE = 64


def _query_ops(fi, tokens, heads):
    q, weights, cos_sin, positions = query_inputs(tokens, heads)
    rope = fi.Rope("neox", "first64", cos_sin, positions)
    fp8 = (torch.empty(tokens, heads, D, device="cuda", dtype=torch.float8_e4m3fn),
           torch.empty(tokens, heads, device="cuda"))
    mxfp4 = (torch.empty(tokens, heads, D // 2, device="cuda", dtype=torch.uint8),
             torch.empty(tokens, heads, D // 32, device="cuda", dtype=torch.uint8),
             torch.empty(tokens, heads, device="cuda"))
    return {
        "query fp8": lambda: fi.quantize_query_fp8(q, weights, eps=1e-10, out=fp8),
        "query fp8 rope": lambda: fi.quantize_query_fp8(q, weights, eps=1e-10, rope=rope, out=fp8),
        "query mxfp4": lambda: fi.quantize_query_mxfp4(q, weights, out=mxfp4),
        "query mxfp4 rope": lambda: fi.quantize_query_mxfp4(q, weights, rope=rope, out=mxfp4),
    }


def _cache_ops(fi, keys_count):
    keys = torch.randn(keys_count, D, device="cuda", dtype=torch.bfloat16)
    pages = keys_count // PAGE
    order = torch.randperm(pages, device="cuda")
    slots = (order[:, None] * PAGE + torch.arange(PAGE, device="cuda")).reshape(-1)
    like = torch.empty(0, device="cuda")
    ops = {}
    for fmt in ("fp8", "mxfp4"):
        cache = fi.empty_k_cache(pages, PAGE, D, fmt, like=like)
        fi.insert_k_cache(cache, keys, slots)
        per = pages // 16
        block_table = order.view(16, per).to(torch.int32)
        cu = torch.arange(17, device="cuda", dtype=torch.int32) * (per * PAGE)
        ws = fi.gather_k_workspace(cache, block_table, cu, num_keys=keys_count)
        label = f"{keys_count >> 10}K" if keys_count < (1 << 20) else f"{keys_count >> 20}M"
        ops[f"insert {fmt} {label}"] = (lambda c=cache: fi.insert_k_cache(c, keys, slots))
        ops[f"gather {fmt} {label}"] = (
            lambda c=cache, b=block_table, w=ws: fi.gather_k_workspace(c, b, cu,
                                                                       num_keys=keys_count, out=w))
    return ops


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated substrings of op names")
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    import flashindexer as fi

    ops = {}
    ops.update(_query_ops(fi, 16384, 64))
    ops.update(_cache_ops(fi, 1 << 16))
    ops.update(_cache_ops(fi, 1 << 20))
    wanted = [w for w in args.only.split(",") if w]
    for name, op in ops.items():
        if wanted and not any(w in name for w in wanted):
            continue
        for _ in range(args.calls):
            op()
        torch.cuda.synchronize()
        print(name, "done")


if __name__ == "__main__":
    main()
