#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SM clock and board power under sustained load: the FP8 GEMM ceiling against our kernels.

Samples nvidia-smi every 50 ms while it runs, each for a few seconds, torch._scaled_mm FP8
8192^3 (the scoring's same-run ceiling), our mqa_logits on two prefill shapes and our
paged_mqa_logits on one decode shape, and prints for each the rate it reached and the mean SM
clock, memory clock, board power and temperature over the last two thirds of its samples (the
first third is the ramp), and the share of those samples in which the driver reported its
software power cap active (the clocks held down to keep the board at its limit). It shows whether
a kernel is held by the board power limit (on an H200, 700 W) and at what clock, which decides
what a "same-run ceiling" means. --decode runs the 2 GiB device-to-device copy (the decode
ceiling), a plain read (torch.sum) of 1.1 GB and decode shapes instead: what moving the bytes
alone draws, against decode. With several shims, each runs the decode shapes in turn (for builds
that differ in what the kernel does per key).

  python3 -m dev.probes.power_probe --shim build/libflashindexer_bench_shim.so [more.so ...]
      [--decode]
"""
import argparse
import datetime
import subprocess
import tempfile
import time

import torch

from bench.inputs import DecodeInputs, PrefillInputs
from bench.timing import event_median_ms, graph_ms
from dev.ab.shim import DECODE, load_shim, mqa_logits, paged_mqa_logits

QUERY = ("timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,"
         "clocks_event_reasons.sw_power_cap")


def parse_samples(text):
    samples = []
    for line in text.strip().splitlines():
        fields = [f.strip() for f in line.split(",")]
        try:
            stamp = datetime.datetime.strptime(fields[0], "%Y/%m/%d %H:%M:%S.%f")
            capped = fields[5] == "Active"
            samples.append((stamp, *(float(f) for f in fields[1:5]), capped))
        except (ValueError, IndexError):
            continue  # a header or a field the driver could not read
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", nargs="+", default=["build/libflashindexer_bench_shim.so"])
    parser.add_argument("--decode", action="store_true",
                        help="the copy, a plain read and decode shapes instead of the GEMM and prefill")
    args = parser.parse_args()
    libs = [(path.rsplit("/", 1)[-1], load_shim(path)) for path in args.shim]
    lib = libs[0][1]
    # To a file: a pipe read only at the end fills after ~30 s and stops the sampler.
    sampler_log = tempfile.TemporaryFile(mode="w+")
    sampler = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}",
                                "--format=csv,noheader,nounits", "-lms", "50"],
                               stdout=sampler_log, text=True)
    phases = []

    def phase(name, run):
        torch.cuda.synchronize()
        start = datetime.datetime.now()
        result = run()
        torch.cuda.synchronize()
        phases.append((name, start, datetime.datetime.now(), result))

    time.sleep(1)
    decode = {c[0]: c for c in DECODE}

    def run_decode(name, replays):
        # The inputs are made outside the phase, whose samples then cover only the replays (of
        # graphs of 10 calls).
        _, heads, batch, ctx, next_n, ragged = decode[name]
        inputs = DecodeInputs(heads, batch, ctx, next_n, ragged)
        logits = torch.empty(batch * next_n, inputs.width, device="cuda")
        for shim_name, shim in libs:
            label = f" ({shim_name})" if len(libs) > 1 else ""
            call = lambda: paged_mqa_logits(shim, inputs, logits, 0)
            phase(f"paged_mqa_logits {name}{label}",
                  lambda: f"{graph_ms(call, 10, replays) * 1e3:.1f} us")

    if args.decode:
        src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        copy_once = lambda: dst.copy_(src)
        copy = lambda calls: f"{2 * src.numel() / event_median_ms(copy_once, calls) / 1e6:.0f} GB/s"
        phase("copy 2 GiB, 10 calls (burst)", lambda: copy(10))
        phase("copy 2 GiB, 3000 calls", lambda: copy(3000))
        # A plain read (torch.sum) of the 64 x 131072 case's cache bytes.
        plain = torch.empty(64 * 131072 * 132 // 8, dtype=torch.int64, device="cuda")
        read_once = lambda: torch.sum(plain)
        phase("read 1.1 GB (torch.sum), graphs of 10, 8000 calls", lambda: (
            f"{plain.numel() * 8 / graph_ms(read_once, 10, 800) / 1e6:.0f} GB/s"))
        del plain
        run_decode("H64 b64 131072", 1000)
        run_decode("H32 b128 131072", 600)
        run_decode("H64 b64 32768", 3000)
        run_decode("H32 b64 32768", 3000)
        run_decode("D2 H64 b64 ~65536 n2", 1500)
        phase("copy 2 GiB, 3000 calls, again", lambda: copy(3000))
    else:
        n = 8192
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        mm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        gemm = lambda calls: f"{2 * n ** 3 / event_median_ms(mm, calls) / 1e9:.0f} TFLOP/s"

        def prefill_ms(heads, replays):
            # mqa_logits on 4096 causal-suffix rows x 131072 keys, graphs of 3 calls.
            inputs = PrefillInputs(heads, 4096, 131072)
            logits = torch.empty(4096, 131072, device="cuda")
            call = lambda: mqa_logits(lib, logits, inputs.q, inputs.keys, inputs.kscale,
                                      inputs.weights, inputs.ks, inputs.ke, 0)
            return f"{graph_ms(call, 3, replays):.3f} ms"
        phase("scaled_mm, 10 calls (burst)", lambda: gemm(10))
        phase("scaled_mm, 4000 calls", lambda: gemm(4000))
        phase("mqa_logits H64 4096x131072", lambda: prefill_ms(64, 150))
        phase("mqa_logits H32 4096x131072", lambda: prefill_ms(32, 250))
        phase("scaled_mm, 4000 calls, again", lambda: gemm(4000))
        run_decode("H64 b64 131072", 1000)
    time.sleep(0.5)
    sampler.terminate()
    sampler.wait()
    sampler_log.seek(0)
    samples = parse_samples(sampler_log.read())
    print("| run | seconds | SM MHz (min) | memory MHz | board W | deg C | power cap | result |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for name, start, end, result in phases:
        inside = [s for s in samples if start <= s[0] <= end]
        steady = inside[len(inside) // 3:]
        if not steady:
            seconds = (end - start).total_seconds()
            print(f"| {name} | {seconds:.1f} | - | - | - | - | - | {result} |")
            continue
        mean = lambda i: sum(s[i] for s in steady) / len(steady)
        print(f"| {name} | {(end - start).total_seconds():.1f} | {mean(1):.0f} "
              f"({min(s[1] for s in steady):.0f}) | {mean(2):.0f} | {mean(3):.0f} | {mean(4):.0f} "
              f"| {100 * mean(5):.0f} % | {result} |")


if __name__ == "__main__":
    main()
