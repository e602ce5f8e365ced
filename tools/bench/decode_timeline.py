#!/usr/bin/env python3
"""Where one paged_mqa_logits call's time goes: per-CTA stamps of the scoring kernel.

Needs a diagnostic build (`cmake -DFLASHINDEXER_SCORE_TIMELINE=ON`), whose bench shim exports
fi_score_timeline_read (src/cuda/scoring/score_timeline.cuh). For each decode case (H = 64,
next_n 1, page 64, equal lengths) it times the call as bench_logits.py does (CUDA-graph replay of
10 calls), then makes three single calls and prints, in us from the earliest CTA's entry: when
the CTAs were ready, when the producer issued its first key copy and the consumers got their first
tile (medians), when the producers were done (median), the quantiles of the CTAs' end times, and
the SM clock (clock64 over %globaltimer) and the share of their cycles the consumers spent waiting
for key tiles and the producers for free stages. Over the calls of a case it then compares the CTAs
SM by SM (%smid): whether the SMs that end late in one call end late in the next (the correlation
of their end times), and how far the slowest SMs' mean end lies past the mean. --dump writes every
CTA's record (SM, end, tiles) of every call as JSON.

    python3 tools/bench/decode_timeline.py --shim build-timeline/libflashindexer_bench_shim.so
"""
import argparse
import ctypes
import json
import statistics

import torch

from bench_logits import DecodeInputs, graph_ms, load_shim, paged_mqa_logits

CASES = [(1, 131072), (16, 65536), (64, 32768), (64, 131072), (256, 32768)]  # batch, length
CTAS, SLOTS = 1024, 32  # score_timeline.cuh: kTimelineCtas, kTimelineSlots
ENTRY, READY, FIRST_LOAD, FIRST_TILE, DONE0, DONE1, PRODUCER_DONE, TILES, CLOCK = range(9)
SMID, CONSUMER_WAIT, PRODUCER_WAIT = 16, 17, 21  # kSmidSlot, kConsumerWaitSlot, kProducerWaitSlot


def quantile(values, q):
    return values[min(len(values) - 1, int(q * len(values)))]


def describe(record, ctas, us_per_call):
    t0 = min(record[c][ENTRY] for c in ctas)
    since = lambda c, slot: (record[c][slot] - t0) / 1e3
    median = lambda slot: statistics.median(since(c, slot) for c in ctas)
    ends = sorted(max(since(c, DONE0), since(c, DONE1)) for c in ctas)
    tiles = sorted(record[c][TILES] + record[c][TILES + CLOCK] for c in ctas)
    # Cycles waited over cycles in all: consumer warpgroups waiting for key tiles, producer warps
    # for free stages (each warp that loaded).
    consumer_waits = [record[c][CONSUMER_WAIT + 2 * g] / record[c][CONSUMER_WAIT + 2 * g + 1]
                      for c in ctas for g in range(2) if record[c][CONSUMER_WAIT + 2 * g + 1]]
    producer_waits = [record[c][PRODUCER_WAIT + 2 * w] / record[c][PRODUCER_WAIT + 2 * w + 1]
                      for c in ctas for w in range(4) if record[c][PRODUCER_WAIT + 2 * w + 1]]
    ghz = statistics.median(
        (record[c][CLOCK + DONE0] - record[c][CLOCK + FIRST_TILE]) /
        max(1, record[c][DONE0] - record[c][FIRST_TILE]) for c in ctas)
    return (f"graph {us_per_call:.1f} us/call | {len(ctas)} CTAs, tiles {tiles[0]}-{tiles[-1]} | "
            f"ready {median(READY):.2f} | first load {median(FIRST_LOAD):.2f} | "
            f"first tile {median(FIRST_TILE):.2f} | producers done {median(PRODUCER_DONE):.2f} | "
            f"ends min {ends[0]:.2f} p10 {quantile(ends, .1):.2f} median {quantile(ends, .5):.2f} "
            f"p90 {quantile(ends, .9):.2f} max {ends[-1]:.2f} | {ghz:.2f} GHz | waiting: consumers "
            f"{statistics.median(consumer_waits):.2f}, producers "
            f"{statistics.median(producer_waits):.2f} of their cycles (medians)")


def cta_ends(record, ctas):
    """{smid: us from the earliest entry to the CTA's end} of one call."""
    t0 = min(record[c][ENTRY] for c in ctas)
    return {record[c][SMID]: (max(record[c][DONE0], record[c][DONE1]) - t0) / 1e3 for c in ctas}


def compare_sms(calls):
    """calls: one {smid: end us} per call, each SM holding one CTA in every call."""
    sms = sorted(set.intersection(*(set(ends) for ends in calls)))
    if len(calls) < 2 or len(sms) < 3:
        return "too few calls or SMs to compare"
    pairs = [(statistics.correlation([a[s] for s in sms], [b[s] for s in sms]))
             for a, b in zip(calls, calls[1:])]
    mean_end = {s: statistics.mean(ends[s] for ends in calls) for s in sms}
    by_end = sorted(sms, key=mean_end.get)
    overall = statistics.mean(mean_end.values())
    tenth = max(1, len(sms) // 10)
    slow = statistics.mean(mean_end[s] for s in by_end[-tenth:])
    fast = statistics.mean(mean_end[s] for s in by_end[:tenth])
    return (f"{len(sms)} SMs over {len(calls)} calls | end-time correlation of consecutive "
            f"calls {', '.join(f'{r:.2f}' for r in pairs)} | mean end {overall:.1f} us, fastest "
            f"tenth {fast:.1f}, slowest tenth {slow:.1f} | slowest SMs {by_end[-tenth:]}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", required=True)
    parser.add_argument("--calls", type=int, default=3, help="single calls per case")
    parser.add_argument("--cases", default=",".join(f"{b}x{n}" for b, n in CASES),
                        help="BATCHxLENGTH,...")
    parser.add_argument("--dump", help="write every CTA's record of every call here (JSON)")
    args = parser.parse_args()
    cases = [tuple(int(v) for v in case.split("x")) for case in args.cases.split(",")]
    dump = []
    lib = load_shim(args.shim)
    lib.fi_score_timeline_read.restype = ctypes.c_int
    lib.fi_score_timeline_read.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    buffer = (ctypes.c_uint64 * (CTAS * SLOTS))()
    for batch, length in cases:
        inputs = DecodeInputs(64, batch, length, 1, False)
        logits = torch.empty(batch, inputs.width, device="cuda")
        call = lambda: paged_mqa_logits(lib, inputs, logits, 0)
        us_per_call = graph_ms(call, 10, 10, 150) * 1e3
        calls = []
        for rep in range(args.calls):
            ctypes.memset(buffer, 0, ctypes.sizeof(buffer))
            call()
            torch.cuda.synchronize()
            if lib.fi_score_timeline_read(buffer, ctypes.sizeof(buffer)) != 0:
                raise RuntimeError("fi_score_timeline_read failed")
            record = [buffer[c * SLOTS:(c + 1) * SLOTS] for c in range(CTAS)]
            ctas = [c for c in range(CTAS) if record[c][ENTRY] != 0]
            print(f"b{batch} x {length} call {rep}: {describe(record, ctas, us_per_call)}",
                  flush=True)
            calls.append(cta_ends(record, ctas))
            dump.append({"batch": batch, "length": length, "call": rep, "us_per_call": us_per_call,
                         "ctas": [{"sm": record[c][SMID], "end_us": calls[-1][record[c][SMID]],
                                   "tiles": record[c][TILES] + record[c][TILES + CLOCK]}
                                  for c in ctas]})
        print(f"b{batch} x {length}: {compare_sms(calls)}", flush=True)
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(dump, f)


if __name__ == "__main__":
    main()
