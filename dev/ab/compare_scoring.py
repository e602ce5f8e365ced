# SPDX-License-Identifier: Apache-2.0
"""Two or more builds of the bench shim, in alternation in one process, on the same inputs.

For a scoring change whose effect is smaller than the spread between machines and runs:
  * decode (paged_mqa_logits): each round times every shim on each case, one after the other. Times
    in us per call: CUDA-graph replay of 10 calls, median of 10 replays after 150 ms of warm-up,
    warm L2, clean=True. The last columns are the K-cache bytes read per second of the last build
    and whether all builds wrote the same logits, bit for bit;
  * prefill (mqa_logits, --prefill): no timing (compare_builds.py and `python -m bench scoring` time it);
    three calls of every build on each case, each compared bit for bit with the first build's
    first call, with the key tiles of any entry that differs. A schedule must never change a
    score, and a race that only some timings expose shows up here as a few wrong tiles.

    python3 -m dev.ab.compare_scoring old/libflashindexer_bench_shim.so \\
        build/libflashindexer_bench_shim.so [--only "D2,b1 "] [--rounds 2] [--prefill]
"""
import argparse
import functools

import torch

from bench.cases import selected
from bench.inputs import DecodeInputs, fp8_keys, ranges_for
from bench.timing import graph_ms
from dev.ab.shim import DECODE, add_only_argument, load_shim, mqa_logits, paged_mqa_logits

# The shim tools' decode cases (name, H, batch, context length, next_n, ragged: lengths
# 0.7-1.3 x, 2-D), batches on either side of 64 x 32768, a ragged next_n 1 batch and a ragged
# H = 32 next_n 2 batch.
CASES = [case[:6] for case in DECODE] + [
    ("H64 b66 32768", 64, 66, 32768, 1, False),
    ("H64 b60 32768", 64, 60, 32768, 1, False),
    ("R H64 b64 ~32768 n1", 64, 64, 32768, 1, True),
    ("R H32 b64 ~65536 n2", 32, 64, 65536, 2, True),
]


# name, H, rows, keys (causal-suffix rows)
PREFILL = [
    ("prefill H32 517x6000", 32, 517, 6000),
    ("prefill H32 2048x32768", 32, 2048, 32768),
    ("prefill H64 517x6000", 64, 517, 6000),
    ("prefill H64 2048x32768", 64, 2048, 32768),
]


def compare_prefill(libs, only):
    torch.manual_seed(0)
    for name, heads, rows, keys in PREFILL:
        if not selected(only, name):
            continue
        q = torch.randn(rows, heads, 128, device="cuda",
                        dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        k, kscale = fp8_keys(torch.randn(keys, 128, device="cuda", dtype=torch.bfloat16))
        weights = torch.randn(rows, heads, device="cuda")
        ks, ke = ranges_for("suffix", rows, keys, "cuda")
        first = None
        for shim_name, lib in libs:
            for call_index in range(3):
                logits = torch.full((rows, keys), float("nan"), device="cuda")
                mqa_logits(lib, logits, q, k, kscale, weights, ks, ke, 1)
                bits = logits.view(torch.int32)
                if first is None:
                    first = bits.clone()
                    continue
                differ = bits != first
                count = int(differ.sum())
                text = f"{name} {shim_name} call {call_index}: {count} entries differ"
                if count:
                    tiles = torch.unique(differ.nonzero()[:, 1] // 64).tolist()
                    text += f", key tiles {tiles[:16]}{' ...' if len(tiles) > 16 else ''}"
                print(text, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shims", nargs="+")
    parser.add_argument("--rounds", type=int, default=2)
    add_only_argument(parser)
    parser.add_argument("--prefill", action="store_true",
                        help="compare the prefill logits bit for bit instead of timing decode")
    args = parser.parse_args()
    libs = [(path.split("/")[-1], load_shim(path)) for path in args.shims]
    if args.prefill:
        compare_prefill(libs, args.only)
        return
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; us per call\n")
    print("| case | " + " | ".join(f"{name} r{r}" for r in range(args.rounds) for name, _ in libs)
          + " | K-read GB/s (last) | logits |")
    print("|---|" + "---:|" * (args.rounds * len(libs) + 1) + "---|")
    for name, heads, batch, ctx, next_n, ragged in CASES:
        if not selected(args.only, name):
            continue
        inputs = DecodeInputs(heads, batch, ctx, next_n, ragged)
        first, times = [], []
        for round_index in range(args.rounds):
            for _, lib in libs:
                logits = torch.full((batch * next_n, inputs.width), float("nan"), device="cuda")
                call = functools.partial(paged_mqa_logits, lib, inputs, logits, 1)
                call()
                torch.cuda.synchronize()
                if round_index == 0:
                    first.append(logits.view(torch.int32).clone())
                times.append(graph_ms(call, 10, 10, 150) * 1e3)
        same = all(torch.equal(first[0], other) for other in first[1:])
        k_bytes = int(inputs.lens.sum()) * 132
        print(f"| {name} | " + " | ".join(f"{t:.1f}" for t in times) +
              f" | {k_bytes / times[-1] / 1e3:.0f} | {'same bits' if same else 'DIFFERENT'} |",
              flush=True)
        del inputs, first
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
