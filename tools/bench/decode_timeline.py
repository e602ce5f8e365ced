#!/usr/bin/env python3
"""Where one paged_mqa_logits call's time goes: per-CTA stamps of the scoring kernel.

Needs a diagnostic build (`cmake -DFLASHINDEXER_SCORE_TIMELINE=ON`), whose bench shim exports
fi_score_timeline_read (src/cuda/scoring/score_timeline.cuh). For each decode case (H = 64,
next_n 1, page 64, equal lengths) it times the call as bench_logits.py does (CUDA-graph replay of
10 calls), then makes three single calls and prints, in us from the earliest CTA's entry: when
the CTAs were ready, when the producer issued its first key copy and the consumers got their first
tile (medians), when the producers were done (median), the quantiles of the CTAs' end times, and
the SM clock (clock64 over %globaltimer).

    python3 tools/bench/decode_timeline.py --shim build-timeline/libflashindexer_bench_shim.so
"""
import argparse
import ctypes
import statistics

import torch

from bench_logits import DecodeInputs, graph_ms, load_shim, paged_mqa_logits

CASES = [(1, 131072), (16, 65536), (64, 32768), (64, 131072), (256, 32768)]  # batch, length
CTAS, SLOTS = 1024, 16  # score_timeline.cuh: kTimelineCtas, kTimelineSlots
ENTRY, READY, FIRST_LOAD, FIRST_TILE, DONE0, DONE1, PRODUCER_DONE, TILES, CLOCK = range(9)


def quantile(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]


def describe(record, ctas, us_per_call):
    t0 = min(record[c][ENTRY] for c in ctas)
    since = lambda c, slot: (record[c][slot] - t0) / 1e3
    median = lambda slot: statistics.median(since(c, slot) for c in ctas)
    ends = sorted(max(since(c, DONE0), since(c, DONE1)) for c in ctas)
    tiles = sorted(record[c][TILES] + record[c][TILES + CLOCK] for c in ctas)
    ghz = statistics.median(
        (record[c][CLOCK + DONE0] - record[c][CLOCK + FIRST_TILE]) /
        max(1, record[c][DONE0] - record[c][FIRST_TILE]) for c in ctas)
    return (f"graph {us_per_call:.1f} us/call | {len(ctas)} CTAs, tiles {tiles[0]}-{tiles[-1]} | "
            f"ready {median(READY):.2f} | first load {median(FIRST_LOAD):.2f} | "
            f"first tile {median(FIRST_TILE):.2f} | producers done {median(PRODUCER_DONE):.2f} | "
            f"ends min {ends[0]:.2f} p10 {quantile(ends, .1):.2f} median {quantile(ends, .5):.2f} "
            f"p90 {quantile(ends, .9):.2f} max {ends[-1]:.2f} | {ghz:.2f} GHz")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    args = parser.parse_args()
    lib = load_shim(args.shim)
    lib.fi_score_timeline_read.restype = ctypes.c_int
    lib.fi_score_timeline_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    buffer = (ctypes.c_uint64 * (CTAS * SLOTS))()
    for batch, length in CASES:
        inputs = DecodeInputs(64, batch, length, 1, False)
        logits = torch.empty(batch, inputs.width, device="cuda")
        call = lambda: paged_mqa_logits(lib, inputs, logits, 0)
        us_per_call = graph_ms(call, 10, 10, 150) * 1e3
        for rep in range(3):
            ctypes.memset(buffer, 0, ctypes.sizeof(buffer))
            call()
            torch.cuda.synchronize()
            if lib.fi_score_timeline_read(buffer, ctypes.sizeof(buffer)) != 0:
                raise RuntimeError("fi_score_timeline_read failed")
            record = [buffer[c * SLOTS:(c + 1) * SLOTS] for c in range(CTAS)]
            ctas = [c for c in range(CTAS) if record[c][ENTRY] != 0]
            print(f"b{batch} x {length} call {rep}: {describe(record, ctas, us_per_call)}",
                  flush=True)


if __name__ == "__main__":
    main()
