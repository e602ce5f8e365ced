#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a scoring kernel's warps spend their instructions and stalls, from `ncu` source counters.

Two steps on a machine with the GPU and ncu:

  1. one indexer_prefill call through the bench shim under ncu, kept to one launch of a kernel:

    ncu --section WarpStateStats --section SourceCounters --import-source no \\
        --kernel-name-base demangled \\
        --kernel-name regex:"\\(int\\)32, \\(int\\)256, \\(bool\\)0, \\(bool\\)1" --launch-count 1 \\
        -o emit32 python3 -m dev.probes.sass_split --call build/libflashindexer_bench_shim.so \\
        --path fused --heads 32
    ncu -i emit32.ncu-rep --page source --csv --print-source sass > emit32.csv

     (`(bool)1` is the emitting scan of the fused path; `--path dense` with `(bool)0` the storing
     kernel of the dense path);
  2. the split, for one or more such CSV files:

    python3 -m dev.probes.sass_split emit32.csv store32.csv

For each file: warp instructions executed per QGMMA and stall samples per 1000 QGMMA, for the
consumer warps (code between the consumers' setmaxnreg.inc and the producers' setmaxnreg.dec) and
the producer warps: all samples, and the leading reasons among those the CSV has columns for
(ncu leaves some out: most of a wgmma's samples have none); then the consumer instructions with
the most samples, the consumer opcodes executed per QGMMA, and with two files the opcodes whose
counts differ most between them.
"""
import argparse
import collections
import csv
import re

REASONS = ("stall_long_sb", "stall_wait", "stall_selected", "stall_barrier", "stall_short_sb",
           "stall_branch_resolving", "stall_dispatch", "stall_misc", "stall_not_selected",
           "stall_no_inst", "stall_math", "stall_mio")


def number(text):
    return int(text) if text not in ("", "-") else 0


def opcode(source):
    return re.sub(r"^@!?U?P\w+\s+", "", source.strip()).split(" ")[0]


def split(path):
    """(QGMMA count, {region: [instructions, all stall samples, Counter of samples by reason]},
    consumer opcodes, [(all samples, source)] of the consumer instructions)."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header = next(i for i, row in enumerate(rows) if "Source" in row and "Address" in row)
    index = {name: i for i, name in enumerate(rows[header])}
    lines = rows[header + 1:]
    sources = [row[index["Source"]] for row in lines]
    executed = [number(row[index["Instructions Executed"]]) for row in lines]
    qgmma = sum(n for s, n in zip(sources, executed) if "QGMMA" in s)
    consumers = next(i for i, s in enumerate(sources) if "TRY_ALLOC" in s)
    producers = next(i for i, s in enumerate(sources) if "DEALLOC" in s)
    regions = collections.defaultdict(lambda: [0, 0, collections.Counter()])
    opcodes = collections.Counter()
    stalled = []
    for i, (row, source, count) in enumerate(zip(lines, sources, executed)):
        region = "consumers" if consumers <= i < producers else (
            "producers" if i >= producers else "set-up")
        samples = number(row[index["Warp Stall Sampling (All Samples)"]])
        regions[region][0] += count
        regions[region][1] += samples
        for reason in REASONS:
            regions[region][2][reason] += number(row[index[reason]])
        if region == "consumers":
            opcodes[opcode(source)] += count
            stalled.append((samples, source.strip()))
    return qgmma, regions, opcodes, sorted(stalled, reverse=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("csv", nargs="*", help="ncu --page source --csv --print-source sass files")
    parser.add_argument("--call", metavar="SHIM",
                        help="instead: run one indexer_prefill call through this bench shim")
    parser.add_argument("--path", choices=("dense", "fused"), default="fused")
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--rows", type=int, default=2048)
    args = parser.parse_args()
    if args.call:
        import torch
        from bench.inputs import PrefillInputs
        from dev.ab.shim import K, WIDTH, load_shim, prefill_call
        lib = load_shim(args.call)
        workspace = torch.empty(lib.fi_indexer_workspace_size(K), dtype=torch.uint8,
                                device="cuda")
        out = torch.empty(args.rows, K, dtype=torch.int32, device="cuda")
        inputs = PrefillInputs(args.heads, args.rows, WIDTH)
        prefill_call(lib, inputs, out, 1 if args.path == "dense" else 2, workspace)()
        torch.cuda.synchronize()
        return
    per_file = []
    for path in args.csv:
        qgmma, regions, opcodes, stalled = split(path)
        print(f"{path}: {qgmma} QGMMA")
        for region, (count, samples, stalls) in regions.items():
            if count < qgmma // 100:  # the set-up before the warp roles split
                continue
            leading = " ".join(f"{reason[6:]} {1000 * n / qgmma:.2f}"
                               for reason, n in stalls.most_common(5))
            print(f"  {region:9s} {count / qgmma:6.1f} instructions per QGMMA, "
                  f"{1000 * samples / qgmma:6.2f} stall samples per 1000 QGMMA "
                  f"(by reason: {1000 * sum(stalls.values()) / qgmma:.2f}, {leading})")
        print("  consumer instructions with the most stall samples per 1000 QGMMA: " + "; ".join(
            f"{source} {1000 * n / qgmma:.2f}" for n, source in stalled[:5]))
        print("  consumer opcodes per QGMMA: " + " ".join(
            f"{op} {n / qgmma:.2f}" for op, n in opcodes.most_common(20)))
        per_file.append({op: n / qgmma for op, n in opcodes.items()})
    if len(per_file) == 2:
        first, second = per_file
        ops = sorted(set(first) | set(second),
                     key=lambda op: -abs(first.get(op, 0) - second.get(op, 0)))
        print(f"consumer opcodes per QGMMA, {args.csv[0]} against {args.csv[1]}:")
        for op in ops[:20]:
            print(f"  {op:32s} {first.get(op, 0):6.2f} {second.get(op, 0):6.2f}")


if __name__ == "__main__":
    main()
