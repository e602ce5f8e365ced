# SPDX-License-Identifier: Apache-2.0
"""topk_per_row of several builds of the bench shim, timed in alternation on the same tensors.

For changes smaller than the run-to-run spread, and for timing builds that leave a phase out
(so their answers are not checked here: check a real build with `python -m bench topk`). Per case and
round, every shim is timed one after the other: CUDA events, median of --iters calls, L2
flushed before each; printed as min/max over --rounds rounds, in ms. Cases: N(0,1) logits,
full rows (prefill form), k as listed.

    python3 -m dev.ab.alternate_topk_builds old/libflashindexer_bench_shim.so \\
        build/libflashindexer_bench_shim.so
"""
import argparse

import torch

from bench.timing import event_median_ms
from dev.ab.shim import load_shim, make_call

CASES = [  # rows, width, k, dtype
    (4096, 131072, 2048, torch.float32),
    (4096, 131072, 2048, torch.bfloat16),
    (4096, 32768, 512, torch.float32),
    (264, 131072, 2048, torch.float32),
    (64, 131072, 2048, torch.float32),
    (128, 131072, 2048, torch.float32),
    (1, 131072, 2048, torch.float32),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shims", nargs="+")
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    libs = {path: load_shim(path) for path in args.shims}
    for rows, width, k, dtype in CASES:
        logits = torch.randn(rows, width, device="cuda").to(dtype)
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        times = {path: [] for path in args.shims}
        for _ in range(args.rounds):
            for path, lib in libs.items():
                call = make_call(lib, logits, out, k, "prefill")
                call()
                torch.cuda.synchronize()
                times[path].append(event_median_ms(call, args.iters, before=flush.zero_))
        cells = " ".join(f"{path.split('/')[-1]}={min(t):.4f}/{max(t):.4f}"
                         for path, t in times.items())
        print(f"{rows}x{width} k={k} {str(dtype).split('.')[-1]}: {cells}", flush=True)


if __name__ == "__main__":
    main()
