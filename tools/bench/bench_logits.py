#!/usr/bin/env python3
"""GPU FP8 scoring (mqa_logits, paged_mqa_logits) on H200-class GPUs, with its ceilings.

Calls the C++ ops through tools/bench/bench_shim.cpp (ctypes) on torch CUDA tensors. In the
same process it measures the ceilings: torch._scaled_mm FP8 8192^3 (TFLOP/s) and a 2 GiB
device-to-device copy (GB/s, read + write). Each case:
  * checks a sample of rows against torch references, DeepGEMM's metric
    diff = 1 - 2 sum(xy) / sum(x^2 + y^2) over visible entries: "sim" against fp32 math on the
    dequantized FP8 inputs (< 5e-6), "bf16" against the bf16 inputs before quantization (< 1e-3);
  * times our op as the replay of a CUDA graph of `--batch` calls (GPU time, no host launch
    cost), median of `--iters` replays, clean=False (the logits the peer writes) unless noted;
  * measures after --warm-ms of back-to-back replays, so that every case and the ceilings run
    at the clocks of sustained load (see Ceilings); fractions are given of both the sustained
    and the burst ceilings.
Prefill TFLOP/s counts visible (row, key) pairs only: 2 * pairs * H * 128 / t. Decode GB/s
counts the K cache bytes read (132 per visible key of each request) plus fp32 logits written,
as the anchor table does; "K-read frac" is the K bytes alone over the copy ceiling. Each decode
case also times a plain read of as many bytes (torch.sum over them, same graph and warm-up): a
kernel of that size with its own start-up and tail, which the 2 GiB copy does not show.
The DeepGEMM column is the anchor table (../shared/reference/anchors-h200.md, measured
separately on an H200 with warm L2): it is printed for comparison, not measured here.

  python3 tools/bench/bench_logits.py --shim build/libflashindexer_bench_shim.so
"""
import argparse
import ctypes
import time

import torch

from cuda_timing import capture_graph, event_median_ms

# name, H, rows, keys, pattern; anchor = DeepGEMM ms from the anchor table (None: not measured)
PREFILL = [
    ("H64 4096x32768", 64, 4096, 32768, "suffix", 1.85),
    ("H64 4096x131072", 64, 4096, 131072, "suffix", 8.60),
    ("H64 2048x262144", 64, 2048, 262144, "suffix", 8.96),
    ("H32 4096x32768", 32, 4096, 32768, "suffix", 1.07),
    ("H32 4096x131072", 32, 4096, 131072, "suffix", 4.55),
    ("H32 2048x262144", 32, 2048, 262144, "suffix", 4.93),
    ("P1 H64 2048x8192", 64, 2048, 8192, "suffix", None),
    ("P2 H64 2048x8192 CP", 64, 2048, 8192, "cp1", None),
    ("P3 H64 8192x65536", 64, 8192, 65536, "suffix", None),
    ("P4 H64 8192x65536 CP", 64, 8192, 65536, "cp2", None),
    ("P6 H64 8192x8192 causal", 64, 8192, 8192, "causal", None),
    ("P7 H32 8192x65536 CP", 32, 8192, 65536, "cp2", None),
]

# name, H, batch, ctx, next_n, ragged; anchor = DeepGEMM us (next_n 1, equal lengths)
DECODE = [
    ("H64 b1 131072", 64, 1, 131072, 1, False, 24),
    ("H64 b16 65536", 64, 16, 65536, 1, False, 56),
    ("H64 b64 32768", 64, 64, 32768, 1, False, 89),
    ("H64 b256 32768", 64, 256, 32768, 1, False, 296),
    ("H64 b64 131072", 64, 64, 131072, 1, False, 301),
    ("H64 b128 131072", 64, 128, 131072, 1, False, 568),
    ("H32 b1 131072", 32, 1, 131072, 1, False, 24),
    ("H32 b64 32768", 32, 64, 32768, 1, False, 92),
    ("H32 b128 131072", 32, 128, 131072, 1, False, 572),
    ("D2 H64 b64 ~65536 n2", 64, 64, 65536, 2, True, None),
    ("D4 H64 b256 ~65536 n2", 64, 256, 65536, 2, True, None),
    ("D7 H64 b64 ~32768 n3", 64, 64, 32768, 3, True, None),
    ("D7 H64 b64 ~32768 n4", 64, 64, 32768, 4, True, None),
    ("D6 H32 b64 ~65536 n4", 32, 64, 65536, 4, True, None),
]


def load_shim(path):
    lib = ctypes.CDLL(path)
    p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
    lib.fi_mqa_logits.restype = i32
    lib.fi_mqa_logits.argtypes = [p, i64, i64, p, i64, i32, p, p, i64, p, p, p, i32, p]
    lib.fi_paged_mqa_logits.restype = i32
    lib.fi_paged_mqa_logits.argtypes = [p, i64, i64, p, i64, i32, i32, p, i64, i32, i64, p, p,
                                        i32, p, i64, i32, p]
    lib.fi_last_error.restype = ctypes.c_char_p
    return lib


def mqa_logits(lib, logits, q, k, kscale, weights, ks, ke, clean):
    """Our mqa_logits through the shim: q [rows, H, 128] e4m3, keys [keys, 128] e4m3 with fp32
    scales, weights [rows, H], row ranges [rows] int32, into logits [rows, width] fp32."""
    rows, heads = q.shape[0], q.shape[1]
    code = lib.fi_mqa_logits(logits.data_ptr(), logits.stride(0), logits.shape[1], q.data_ptr(),
                             rows, heads, k.data_ptr(), kscale.data_ptr(), k.shape[0],
                             weights.data_ptr(), ks.data_ptr(), ke.data_ptr(), clean,
                             torch.cuda.current_stream().cuda_stream)
    if code != 0:
        raise RuntimeError(lib.fi_last_error().decode())


def paged_mqa_logits(lib, inputs, logits, clean):
    """Our paged_mqa_logits through the shim on a DecodeInputs step (2-D lengths), into logits
    [batch * next_n, width] fp32."""
    batch, next_n, heads = inputs.q.shape[0], inputs.q.shape[1], inputs.q.shape[2]
    code = lib.fi_paged_mqa_logits(
        logits.data_ptr(), logits.stride(0), logits.shape[1], inputs.q.data_ptr(), batch, next_n,
        heads, inputs.cache.data_ptr(), inputs.total_pages, inputs.page, inputs.page_bytes,
        inputs.weights.data_ptr(), inputs.lens2d.data_ptr(), 1, inputs.table.data_ptr(),
        inputs.table_cols, clean, torch.cuda.current_stream().cuda_stream)
    if code != 0:
        raise RuntimeError(lib.fi_last_error().decode())


def fp8_keys(keys_bf16):
    """Per-key amax / 448 scales (DeepGEMM's test quantization): e4m3 values, fp32 scales."""
    amax = keys_bf16.float().abs().amax(dim=-1, keepdim=True).clamp(min=1e-4)
    scale = amax / 448.0
    return (keys_bf16.float() / scale).to(torch.float8_e4m3fn), scale.squeeze(-1)


def calc_diff(x, y):
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return float(1 - 2 * (x * y).sum() / denominator) if denominator > 0 else 0.0


def check_diffs(name, check, got, sim, ref):
    """DeepGEMM's metric over all sampled visible entries (as its tests take it over a matrix)."""
    got, sim, ref = torch.cat(got), torch.cat(sim), torch.cat(ref)
    sim_diff, ref_diff = calc_diff(got, sim), calc_diff(got, ref)
    # sim is the kernel's arithmetic; bf16 adds the input quantization (not the kernel's doing,
    # and noisy over a few rows), so only sim fails the run.
    if check:
        assert sim_diff < 5e-6, f"{name}: diff sim {sim_diff} (bf16 {ref_diff})"
    return sim_diff, ref_diff


def row_logits(q_rows, weights_rows, keys, kscale):
    """[r, H, D] x [n, D] -> [r, n]: sum_h w * relu(q . k) * kscale, in fp32."""
    dots = torch.einsum("rhd,nd->rhn", q_rows.float(), keys.float())
    return (dots.relu() * weights_rows.float()[:, :, None]).sum(dim=1) * kscale[None, :]


def ranges_for(pattern, rows, keys, device):
    t = torch.arange(rows, device=device, dtype=torch.int64)
    ks = torch.zeros(rows, dtype=torch.int64, device=device)
    if pattern == "suffix":
        ke = t + keys - rows + 1
    elif pattern == "causal":
        ke = t + 1
    else:  # DeepGEMM's context-parallel pattern: two very unequal halves
        cp_id = {"cp1": 1, "cp2": 2}[pattern]
        cp_size = keys // rows
        chunk = rows // 2
        ke = torch.where(t < chunk, cp_id * chunk + t + 1,
                         (2 * cp_size - 1 - cp_id) * chunk + (t - chunk) + 1)
    return ks.to(torch.int32), ke.clamp(max=keys).to(torch.int32)


def warm_up(fn, warm_ms):
    """Calls fn() back to back for warm_ms of wall time, so that the next measurement sees the
    clocks and board power of sustained load (an H200 under FP8 tensor load settles at its 700 W
    limit within tens of ms, its SM clock dropping from 1.98 GHz to ~1.4-1.7 GHz)."""
    if warm_ms <= 0:
        return
    one_ms = max(event_median_ms(fn, 1, warmup=1), 1e-3)
    chunk = max(1, int(10 / one_ms))  # ~10 ms of work per host synchronisation
    start = time.perf_counter()
    while (time.perf_counter() - start) * 1e3 < warm_ms:
        for _ in range(chunk):
            fn()
        torch.cuda.synchronize()


def graph_ms(fn, batch, iters, warm_ms=0):
    """GPU time of one call: a CUDA graph of `batch` calls, median of `iters` replays (after
    warm_ms of replays, when given)."""
    graph = capture_graph(fn, batch)
    warm_up(graph.replay, warm_ms)
    return event_median_ms(graph.replay, iters, warmup=2) / batch


class Ceilings:
    """The same-run ceilings: torch._scaled_mm FP8 8192^3 (TFLOP/s) and a 2 GiB device-to-device
    copy (GB/s, read + write), each measured two ways. "Burst": the median of `iters` calls right
    after start-up, at the clocks of a GPU that has been idle. "Sustained": after `warm_ms` of the
    same op, the way each case is measured: under sustained FP8 tensor load an H200 runs at its
    700 W board limit (measured: the GEMM at ~1.4 GHz and ~690 W, our prefill kernel at ~1.7 GHz
    and ~690 W, against 1.98 GHz at boost), so the burst GEMM ceiling is ~15 % above what the
    GEMM sustains."""

    def __init__(self, iters, warm_ms):
        n = 8192
        a = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device="cuda").to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda")
        mm = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        src = torch.empty(1 << 31, dtype=torch.uint8, device="cuda").random_()
        dst = torch.empty_like(src)
        copy = lambda: dst.copy_(src)
        self.fp8_tflops = 2 * n ** 3 / event_median_ms(mm, iters) / 1e9
        self.copy_gbs = 2 * src.numel() / event_median_ms(copy, iters) / 1e6
        # The GEMM as a CUDA graph, replayed like the cases; the copy eagerly (a captured copy
        # becomes a memcpy node, which measured ~35 % slower than the eager copy kernel).
        self.fp8_tflops_sustained = 2 * n ** 3 / graph_ms(mm, 4, iters, warm_ms) / 1e9
        warm_up(copy, warm_ms)
        self.copy_gbs_sustained = 2 * src.numel() / event_median_ms(copy, iters) / 1e6


def bench_prefill(lib, case, ceil, iters, warm_ms, batch, check_rows, check):
    name, heads, rows, keys, pattern, anchor = case
    dev = "cuda"
    q_bf16 = torch.randn(rows, heads, 128, device=dev, dtype=torch.bfloat16)
    k_bf16 = torch.randn(keys, 128, device=dev, dtype=torch.bfloat16)
    q = q_bf16.to(torch.float8_e4m3fn)
    k, kscale = fp8_keys(k_bf16)
    weights = torch.randn(rows, heads, device=dev)
    ks, ke = ranges_for(pattern, rows, keys, dev)
    logits = torch.empty(rows, keys, device=dev)

    def call(clean=0):
        mqa_logits(lib, logits, q, k, kscale, weights, ks, ke, clean)

    logits.fill_(float("nan"))
    call(clean=1)
    torch.cuda.synchronize()
    sample = torch.randperm(rows, device=dev)[:check_rows].sort().values
    got_all, sim_all, ref_all = [], [], []
    for r in sample.tolist():
        lo, hi = int(ks[r]), int(ke[r])
        got_all.append(logits[r, lo:hi])
        sim_all.append(row_logits(q[r:r + 1], weights[r:r + 1], k[lo:hi], kscale[lo:hi])[0])
        ref_all.append(row_logits(q_bf16[r:r + 1], weights[r:r + 1], k_bf16[lo:hi],
                                  torch.ones_like(kscale[lo:hi]))[0])
        outside = torch.cat([logits[r, :lo], logits[r, hi:]])
        assert not check or bool((outside == float("-inf")).all()), f"{name}: row {r} outside"
    sim_diff, ref_diff = check_diffs(name, check, got_all, sim_all, ref_all)
    pairs = int((ke.long() - ks.long()).clamp(min=0).sum())
    ms = graph_ms(call, batch, iters, warm_ms)
    tflops = 2 * pairs * heads * 128 / ms / 1e9
    anchor_text = f"{anchor:.2f}" if anchor else "-"
    return (f"| {name} | {pairs / 1e6:.0f}M | {ms:.3f} | {tflops:.0f} "
            f"| {tflops / ceil.fp8_tflops_sustained:.2f} | {tflops / ceil.fp8_tflops:.2f} "
            f"| {anchor_text} | {sim_diff:.1e} | {ref_diff:.1e} |")


def chunk_ranges(rows, keys, requests, device):
    """ks / ke [rows] of a prefill chunk of `requests` equal requests: request j's rows (rows /
    requests of them, in order) are the causal suffix of its own keys / requests packed keys."""
    if rows % requests or keys % requests:
        raise ValueError(f"{requests} requests must divide rows {rows} and keys {keys}")
    ks, ke = ranges_for("suffix", rows // requests, keys // requests, device)
    offsets = torch.arange(requests, device=device, dtype=torch.int32) * (keys // requests)
    return ((ks + offsets[:, None]).flatten(), (ke + offsets[:, None]).flatten())


class PrefillInputs:
    """Random prefill inputs of one causal-suffix request (or `requests` equal ones packed:
    chunk_ranges): q [rows, heads, 128] e4m3, keys [width, 128] e4m3 with fp32 scales kscale
    [width], weights [rows, heads], ks / ke [rows]."""

    def __init__(self, heads, rows, width, device="cuda", requests=1):
        self.heads, self.rows, self.width = heads, rows, width
        self.q = torch.randn(rows, heads, 128, device=device,
                             dtype=torch.bfloat16).to(torch.float8_e4m3fn)
        self.keys, self.kscale = fp8_keys(torch.randn(width, 128, device=device,
                                                      dtype=torch.bfloat16))
        self.weights = torch.randn(rows, heads, device=device)
        self.ks, self.ke = chunk_ranges(rows, width, requests, device)


class DecodeInputs:
    """A paged FP8 K cache (page 64, shuffled pages) with random keys, bf16 and FP8 queries,
    weights, 2-D context lengths [batch, next_n] and the block table of one decode step."""

    page = 64

    def __init__(self, heads, batch, ctx, next_n, ragged, dev="cuda"):
        page = self.page
        gen = torch.Generator(device="cpu").manual_seed(batch * 7 + next_n)
        if ragged:
            lens = (ctx * (0.7 + 0.6 * torch.rand(batch, generator=gen))).long()
        else:
            lens = torch.full((batch,), ctx, dtype=torch.long)
        pages_per = (lens + page - 1) // page
        self.total_pages = int(pages_per.sum())
        self.table_cols = int(pages_per.max())
        perm = torch.randperm(self.total_pages, generator=gen)
        table = torch.zeros(batch, self.table_cols, dtype=torch.int32)
        start = 0
        for b in range(batch):
            n = int(pages_per[b])
            table[b, :n] = perm[start:start + n].int()
            start += n
        self.table = table.to(dev)
        self.page_bytes = page * 132
        self.cache = torch.empty(self.total_pages, self.page_bytes, dtype=torch.uint8, device=dev)
        self.k_bf16 = torch.randn(self.total_pages * page, 128, device=dev, dtype=torch.bfloat16)
        self.k, self.kscale = fp8_keys(self.k_bf16)
        pages = self.total_pages
        self.cache[:, :page * 128] = self.k.view(torch.uint8).view(pages, page * 128)
        self.cache[:, page * 128:] = self.kscale.view(pages, page).view(torch.uint8).view(pages, -1)
        self.q_bf16 = torch.randn(batch, next_n, heads, 128, device=dev, dtype=torch.bfloat16)
        self.q = self.q_bf16.to(torch.float8_e4m3fn)
        self.weights = torch.randn(batch * next_n, heads, device=dev)
        # 2-D lengths: slot j sees lens - next_n + j + 1 (the 1-D rule, written out)
        lens2d = (lens[:, None] - next_n + 1 + torch.arange(next_n)[None, :]).clamp(min=0)
        self.lens = lens
        self.lens2d = lens2d.to(torch.int32).to(dev)
        self.width = int(lens.max())


def bench_decode(lib, case, ceil, iters, warm_ms, batch_calls, check_rows, check):
    name, heads, batch, ctx, next_n, ragged, anchor = case
    dev = "cuda"
    inputs = DecodeInputs(heads, batch, ctx, next_n, ragged, dev)
    page, table, width = inputs.page, inputs.table, inputs.width
    q, q_bf16, k, k_bf16, kscale = inputs.q, inputs.q_bf16, inputs.k, inputs.k_bf16, inputs.kscale
    weights, lens, lens2d = inputs.weights, inputs.lens, inputs.lens2d
    gen = torch.Generator(device="cpu").manual_seed(batch * 11 + next_n)
    logits = torch.empty(batch * next_n, width, device=dev)

    def call(clean=0):
        paged_mqa_logits(lib, inputs, logits, clean)

    logits.fill_(float("nan"))
    call(clean=1)
    torch.cuda.synchronize()
    got_all, sim_all, ref_all = [], [], []
    for b in torch.randperm(batch, generator=gen)[:check_rows].tolist():
        n = int(lens[b])
        slots = (table[b, :(n + page - 1) // page].long()[:, None] * page +
                 torch.arange(page, device=dev)[None, :]).reshape(-1)[:n]
        for j in range(next_n):
            r = b * next_n + j
            end = int(lens2d[b, j])
            got_all.append(logits[r, :end])
            sim_all.append(row_logits(q[b, j][None], weights[r:r + 1], k[slots[:end]],
                                      kscale[slots[:end]])[0])
            ref_all.append(row_logits(q_bf16[b, j][None], weights[r:r + 1], k_bf16[slots[:end]],
                                      torch.ones(end, device=dev))[0])
            tail = logits[r, end:]
            assert not check or bool((tail == float("-inf")).all()), f"{name}: row {r} tail"
    sim_diff, ref_diff = check_diffs(name, check, got_all, sim_all, ref_all)
    visible_keys = int(lens.sum())
    k_bytes = visible_keys * 132
    logit_bytes = int(lens2d.long().sum()) * 4
    us = graph_ms(call, batch_calls, iters, warm_ms) * 1e3
    gbs = (k_bytes + logit_bytes) / us / 1e3
    k_gbs = k_bytes / us / 1e3
    anchor_text = f"{anchor}" if anchor else "-"
    # A plain read of as many bytes (torch.sum over them), measured the same way: what a kernel of
    # this size reaches with its own start-up and tail, where the 2 GiB copy shows neither.
    plain = torch.empty(k_bytes // 8, dtype=torch.int64, device=dev)
    read_us = graph_ms(lambda: torch.sum(plain), batch_calls, iters, warm_ms) * 1e3
    return (f"| {name} | {us:.1f} | {gbs:.0f} | {k_gbs / ceil.copy_gbs_sustained:.2f} "
            f"| {k_gbs / ceil.copy_gbs:.2f} | {read_us:.1f} | {read_us / us:.2f} | {anchor_text} "
            f"| {sim_diff:.1e} | {ref_diff:.1e} |")


def print_table(title, columns, cases, row_of):
    """A markdown table: one row_of(case) line per case, printed as soon as it is measured."""
    print(f"\n{title}:\n")
    print("| " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    for case in cases:
        print(row_of(case), flush=True)
        torch.cuda.empty_cache()


def add_only_argument(parser):
    """The --only filter of the bench scripts, read by selected()."""
    parser.add_argument("--only", default="",
                        help="comma-separated substrings; run the cases whose name has one")


def selected(only, name):
    return not only or any(part in name for part in only.split(","))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", default="build/libflashindexer_bench_shim.so")
    parser.add_argument("--iters", type=int, default=10)
    add_only_argument(parser)
    parser.add_argument("--check-rows", type=int, default=6)
    parser.add_argument("--warm-ms", type=int, default=300,
                        help="ms of back-to-back calls before each measurement (0: none)")
    parser.add_argument("--no-check", action="store_true",
                        help="report the diffs without failing (diagnostic kernel variants)")
    args = parser.parse_args()
    lib = load_shim(args.shim)
    torch.manual_seed(0)
    ceil = Ceilings(args.iters, args.warm_ms)
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; same-run ceilings, "
          f"sustained (after {args.warm_ms} ms) / burst: torch._scaled_mm FP8 8192^3 "
          f"{ceil.fp8_tflops_sustained:.0f} / {ceil.fp8_tflops:.0f} TFLOP/s, D2D copy "
          f"{ceil.copy_gbs_sustained:.0f} / {ceil.copy_gbs:.0f} GB/s")
    check = not args.no_check
    print_table("Prefill (mqa_logits, causal-suffix unless noted, clean=False, CUDA-graph replay)",
                ["case", "visible pairs", "ours ms", "ours TFLOP/s", "of FP8 ceiling (sustained)",
                 "of FP8 ceiling (burst)", "DeepGEMM ms (anchor)", "diff sim", "diff bf16"],
                [c for c in PREFILL if selected(args.only, c[0])],
                lambda c: bench_prefill(lib, c, ceil, args.iters, args.warm_ms, 3,
                                        args.check_rows, check))
    print_table("Decode (paged_mqa_logits, page 64, clean=False, CUDA-graph replay, warm L2)",
                ["case", "ours us", "ours GB/s", "K-read frac of copy (sustained)",
                 "K-read frac of copy (burst)", "plain read of the K bytes us",
                 "plain read / ours", "DeepGEMM us (anchor)", "diff sim", "diff bf16"],
                [c for c in DECODE if selected(args.only, c[0])],
                lambda c: bench_decode(lib, c, ceil, args.iters, args.warm_ms, 10,
                                       args.check_rows, check))


if __name__ == "__main__":
    main()
