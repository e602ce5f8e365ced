# SPDX-License-Identifier: Apache-2.0
"""GPU MXFP4 operands against our FP8 ops at the same shapes and against PyTorch, in the same
run: decode (paged_mqa_logits, indexer_decode on both paths), prefill (mqa_logits,
indexer_prefill on both paths), and the exact fallback's cost (keys whose block scales span more
binades than e4m3 holds, recomputed by the fix-up kernel; the fused indexer's rows that meet one
take its dense fallback).

The MXFP4 operands are random E2M1 codes with UE8M0 scale bytes in 2^-4..2^3 (every block of a
vector then lies within the exact span); the FP8 ones are the other routines' (bench/inputs.py).
Each case first checks a sample of rows against fp32 math on the dequantized operands
(DeepGEMM's diff < 5e-6) and the indexer's indices against our top-k over our MXFP4 logits.
Times: CUDA-graph replay after --warm-ms of replays (decode: graphs of 10 calls), warm L2.
Decode rate: the MXFP4 K cache bytes read (68 per visible key) / time, against the same-run
device copy; prefill rate: 2 * visible pairs * H * 128 FLOP / time, against the FP8 GEMM. The
PyTorch peer is bench/routines/scoring.py's (bf16 matmuls) on the dequantized MXFP4 operands.
"""
import collections

import torch

from .. import cases
from ..inputs import DIM, DecodeInputs, PrefillInputs, calc_diff
from ..report import Row, Table
from ..timing import event_median_ms, graph_ms
from .scoring import torch_scores

PAGE = 64
KEY_BYTES = DIM // 2 + DIM // 32  # 68
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]

Decode = collections.namedtuple("Decode", "heads batch ctx k")
Prefill = collections.namedtuple("Prefill", "heads rows keys")


def decode_cases(preset):
    if preset == "quick":
        return [Decode(64, 8, 8192, 512)]
    return [Decode(h, 64, ctx, k) for h in (64, 32) for ctx in (131072, 32768)
            for k in (2048, 512)]


def prefill_cases(preset):
    if preset == "quick":
        return [Prefill(64, 512, 8192)]
    return [Prefill(64, 4096, 131072), Prefill(32, 4096, 131072)]


def random_mxfp4(lead, device="cuda"):
    """(values [*lead, 64] uint8, scales [*lead, 4] uint8): random codes, scales 2^-4..2^3."""
    values = torch.randint(0, 256, (*lead, DIM // 2), dtype=torch.uint8, device=device)
    scales = torch.randint(123, 131, (*lead, DIM // 32), dtype=torch.uint8, device=device)
    return values, scales


def widen_spans(scales, every):
    """Every `every`-th vector's block scales spanning 17 binades (out of the exact span)."""
    flat = scales.view(-1, DIM // 32)
    flat[::every] = torch.tensor([128, 111, 127, 124], dtype=torch.uint8, device=scales.device)


def dequantize(values, scales):
    """[..., 64] + [..., 4] uint8 -> [..., 128] float32 (spec §3.3)."""
    table = torch.tensor(E2M1, device=values.device)
    low = table[(values & 15).long()]
    high = table[(values >> 4).long()]
    x = torch.stack((low, high), dim=-1).flatten(-2)
    return x * scales.float().sub(127).exp2().repeat_interleave(32, dim=-1)


def mxfp4_logits(q, keys, weights):
    """fp32 math: q [r, H, 128], keys [n, 128] -> [r, n]."""
    dots = torch.einsum("rhd,nd->rhn", q, keys)
    return (dots.relu() * weights[:, :, None]).sum(dim=1)


def mxfp4_cache(inputs, stride_bytes):
    """An MXFP4 cache with the FP8 inputs' block table and page count: page p's 64 x 64 value
    bytes, then its 64 x 4 scale bytes, pages stride_bytes apart."""
    pages = inputs.total_pages
    values, scales = random_mxfp4((pages * PAGE,))
    cache = torch.zeros(pages, stride_bytes, dtype=torch.uint8, device="cuda")
    cache[:, :PAGE * 64] = values.view(pages, PAGE * 64)
    cache[:, PAGE * 64:PAGE * KEY_BYTES] = scales.view(pages, PAGE * 4)
    return cache, values, scales


def write_scales(cache, scales):
    pages = cache.shape[0]
    cache[:, PAGE * 64:PAGE * KEY_BYTES] = scales.view(pages, PAGE * 4)


def _check_decode(name, fi, case, inputs, q, cache, k_values, k_scales, logits):
    fi.paged_mqa_logits(q, cache, inputs.weights, inputs.lens, inputs.table, out=logits)
    torch.cuda.synchronize()
    got, expected = [], []
    for b in torch.randperm(case.batch)[:3].tolist():
        slots = inputs.slots(b)
        keys = dequantize(k_values[slots], k_scales[slots])
        got.append(logits[b, :slots.numel()])
        expected.append(mxfp4_logits(dequantize(*(t[b] for t in q)), keys,
                                     inputs.weights[b:b + 1])[0])
    diff = calc_diff(torch.cat(got), torch.cat(expected))
    assert diff < 5e-6, f"{name}: diff against fp32 math {diff}"


def _decode_case(ctx, fi, case, decode_table, later, ceilings):
    """Adds the case's rows to decode_table, and its PyTorch and fallback rows to later."""
    name = f"H{case.heads} {case.batch}x{case.ctx}"
    inputs = DecodeInputs(case.heads, case.batch, case.ctx)
    fp8_cache = fi.PagedKCache(inputs.cache, PAGE, DIM, "fp8")
    # V4's page layout: FP8-sized pages (132 bytes per key), the first 68 per key used.
    data, k_values, k_scales = mxfp4_cache(inputs, inputs.page_bytes)
    cache = fi.PagedKCache(data, PAGE, DIM, "mxfp4")
    q = random_mxfp4((case.batch, 1, case.heads))
    logits = torch.empty(case.batch, inputs.width, device="cuda")
    _check_decode(name, fi, case, inputs, q, cache, k_values, k_scales, logits)

    workspace = torch.empty(fi.indexer_cuda_workspace_size(case.k), dtype=torch.uint8,
                            device="cuda")
    selected = fi.indexer_decode(q, cache, inputs.weights, inputs.lens, inputs.table, case.k,
                                 sorted=True, workspace=workspace)
    expected_topk = fi.topk_per_row(logits, case.k, sorted=True,
                                    lengths=inputs.lens2d.reshape(-1).contiguous())
    assert torch.equal(selected, expected_topk), f"{name}: indexer != top-k of logits"

    out = torch.empty_like(selected)
    iters, warm = ctx.iters(10), ctx.warm_ms

    def scoring(q_, cache_):
        return lambda: fi.paged_mqa_logits(q_, cache_, inputs.weights, inputs.lens, inputs.table,
                                           clean=False, out=logits)

    def indexer(q_, cache_, path="auto"):
        return lambda: fi.indexer_decode(q_, cache_, inputs.weights, inputs.lens, inputs.table,
                                         case.k, out=out, workspace=workspace, path=path)

    fused = fi.indexer_decode(q, cache, inputs.weights, inputs.lens, inputs.table, case.k,
                              sorted=True, workspace=workspace, path="fused")
    assert torch.equal(fused, expected_topk), f"{name}: fused indexer != top-k of logits"
    times = {
        "mxfp4 scoring": graph_ms(scoring(q, cache), 10, iters, warm),
        "fp8 scoring": graph_ms(scoring(inputs.q, fp8_cache), 10, iters, warm),
        "mxfp4 indexer": graph_ms(indexer(q, cache), 10, iters, warm),
        "fp8 indexer": graph_ms(indexer(inputs.q, fp8_cache), 10, iters, warm),
        "mxfp4 fused indexer": graph_ms(indexer(q, cache, "fused"), 10, iters, warm),
        "fp8 fused indexer": graph_ms(indexer(inputs.q, fp8_cache, "fused"), 10, iters, warm),
    }
    k_bytes = int(inputs.lens.long().sum()) * KEY_BYTES
    for what in ("scoring", "indexer", "fused indexer"):
        if what == "scoring" and case.k != 2048:
            continue  # the scoring does not depend on k: one row per shape
        ms = times[f"mxfp4 {what}"]
        gbs = k_bytes / ms / 1e6
        label = (f"{name} scoring" if what == "scoring" else
                 f"{name} indexer k={case.k}" + (", fused path" if what != "indexer" else ""))
        decode_table.add(Row(label, ms, times[f"fp8 {what}"], gbs,
                             gbs / ceilings.copy_gbs_sustained, None,
                             ctx.command("mxfp4", f"decode {name}"),
                             f"MXFP4 decode {label}" if case.heads == 64 and case.ctx == 131072
                             and what != "fused indexer" else None))
    if case.k != 2048:
        return
    # PyTorch on the dequantized operands, request by request.
    q_float = dequantize(*q)
    slots = [inputs.slots(b) for b in range(case.batch)]
    keys = dequantize(k_values, k_scales)
    ones = torch.ones(keys.shape[0], device="cuda")
    peer_out = torch.empty_like(logits)

    def peer():
        for b, rows in enumerate(slots):
            torch_scores(q_float[b], inputs.weights[b:b + 1], keys[rows], ones[rows],
                         peer_out[b:b + 1, :rows.numel()])

    peer_ms = event_median_ms(peer, ctx.iters(3), warmup=1)
    ms = times["mxfp4 scoring"]
    gbs = k_bytes / ms / 1e6
    later["torch"].append(Row(f"decode {name} scoring", ms, peer_ms, gbs,
                        gbs / ceilings.copy_gbs_sustained, None,
                        ctx.command("mxfp4", f"decode {name}")))
    # The fallback: one key in 1024 out of span, its logits recomputed by the fix-up kernel.
    # Measured after every in-span case (run): once a call has flagged a vector, the fix-up of
    # every later MXFP4 call scans its logits, which the in-span rows must not pay.
    def fallback():
        widen_spans(k_scales, 1024)
        write_scales(data, k_scales)
        _check_decode(f"{name} fallback", fi, case, inputs, q, cache, k_values, k_scales, logits)
        fallback_ms = graph_ms(scoring(q, cache), 10, iters, warm)
        gbs = k_bytes / fallback_ms / 1e6
        later["fallback"].append(Row(f"decode {name} scoring, 1/1024 keys out of span",
                                     fallback_ms, ms, gbs, gbs / ceilings.copy_gbs_sustained, None,
                                     ctx.command("mxfp4", f"decode {name}")))
        # The fused indexer: every row meets such a key and takes the dense fallback.
        fused_ms = graph_ms(indexer(q, cache, "fused"), 10, iters, warm)
        gbs = k_bytes / fused_ms / 1e6
        later["fallback"].append(Row(
            f"decode {name} indexer k={case.k}, fused path, 1/1024 keys out of span", fused_ms,
            times["mxfp4 fused indexer"], gbs, gbs / ceilings.copy_gbs_sustained, None,
            ctx.command("mxfp4", f"decode {name}")))

    later["fallback runs"].append(fallback)


def _prefill_case(ctx, fi, case, prefill_table, later, ceilings):
    """Adds the case's rows to prefill_table, and its PyTorch and fallback rows to later."""
    name = f"H{case.heads} {case.rows}x{case.keys}"
    fp8 = PrefillInputs(case.heads, case.rows, case.keys)
    q = random_mxfp4((case.rows, case.heads))
    keys = random_mxfp4((case.keys,))
    logits = torch.empty(case.rows, case.keys, device="cuda")

    def check(label):
        fi.mqa_logits(q, keys, fp8.weights, fp8.ks, fp8.ke, out=logits)
        torch.cuda.synchronize()
        got, expected = [], []
        for r in torch.randperm(case.rows)[:3].tolist():
            lo, hi = int(fp8.ks[r]), int(fp8.ke[r])
            got.append(logits[r, lo:hi])
            expected.append(mxfp4_logits(dequantize(q[0][r], q[1][r])[None],
                                         dequantize(keys[0][lo:hi], keys[1][lo:hi]),
                                         fp8.weights[r:r + 1])[0])
        diff = calc_diff(torch.cat(got), torch.cat(expected))
        assert diff < 5e-6, f"{label}: diff against fp32 math {diff}"

    check(name)
    k = 2048
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8, device="cuda")
    selected = fi.indexer_prefill(q, keys, fp8.weights, fp8.ks, fp8.ke, k, sorted=True,
                                  workspace=workspace, path="fused")
    assert torch.equal(selected, fi.topk_per_row(logits, k, sorted=True, ks=fp8.ks, ke=fp8.ke)), \
        f"{name}: indexer != top-k of logits"
    out = torch.empty_like(selected)
    iters, warm = ctx.iters(5), ctx.warm_ms

    def scoring():
        fi.mqa_logits(q, keys, fp8.weights, fp8.ks, fp8.ke, clean=False, out=logits)

    mxfp4_ms = graph_ms(scoring, 1, iters, warm)
    fp8_ms = graph_ms(lambda: fi.mqa_logits(fp8.q, (fp8.keys, fp8.kscale), fp8.weights, fp8.ks,
                                            fp8.ke, clean=False, out=logits), 1, iters, warm)
    # With a workspace: the operands converted to e4m3 once, then the FP8 kernel; the same bits.
    converted = torch.empty(fi.mqa_logits_cuda_workspace_size(case.rows, case.heads, case.keys),
                            dtype=torch.uint8, device="cuda")
    scoring()
    reference = logits.clone()
    fi.mqa_logits(q, keys, fp8.weights, fp8.ks, fp8.ke, clean=False, out=logits,
                  workspace=converted)
    torch.cuda.synchronize()
    visible = torch.arange(case.keys, device="cuda")[None, :]
    inside = (visible >= fp8.ks[:, None]) & (visible < fp8.ke[:, None])
    assert torch.equal(logits.view(torch.int32)[inside], reference.view(torch.int32)[inside]), \
        f"{name}: the workspace form's logits differ from the converting kernel's"
    del reference, inside
    converted_ms = graph_ms(lambda: fi.mqa_logits(q, keys, fp8.weights, fp8.ks, fp8.ke,
                                                  clean=False, out=logits, workspace=converted),
                            1, iters, warm)
    dense = fi.indexer_prefill(q, keys, fp8.weights, fp8.ks, fp8.ke, k, sorted=True,
                               workspace=workspace, path="dense")
    assert torch.equal(dense, selected), f"{name}: dense indexer != fused indexer"

    def indexer(path):
        return lambda: fi.indexer_prefill(q, keys, fp8.weights, fp8.ks, fp8.ke, k, out=out,
                                          workspace=workspace, path=path)

    indexer_ms = graph_ms(indexer("fused"), 1, iters, warm)
    dense_ms = graph_ms(indexer("dense"), 1, iters, warm)
    tflop = 2 * fp8.visible_pairs() * case.heads * DIM / 1e9
    for label, ms, peer in ((f"{name} scoring", mxfp4_ms, fp8_ms),
                            (f"{name} scoring, with a workspace (converted once, FP8 kernel)",
                             converted_ms, fp8_ms),
                            (f"{name} indexer k={k}, fused path (peer: MXFP4 scoring with a "
                             "workspace)", indexer_ms, converted_ms),
                            (f"{name} indexer k={k}, dense path (peer: MXFP4 scoring with a "
                             "workspace)", dense_ms, converted_ms)):
        rate = tflop / ms
        prefill_table.add(Row(label, ms, peer, rate, rate / ceilings.fp8_tflops_sustained, None,
                              ctx.command("mxfp4", f"prefill {name}")))
    peer_out = torch.empty_like(logits)
    q_float, k_float = dequantize(*q), dequantize(*keys)
    ones = torch.ones(case.keys, device="cuda")
    peer_ms = event_median_ms(lambda: torch_scores(q_float, fp8.weights, k_float, ones, peer_out,
                                                   fp8.ks, fp8.ke), ctx.iters(3), warmup=1)
    later["torch"].append(Row(f"prefill {name} scoring", mxfp4_ms, peer_ms, tflop / mxfp4_ms,
                        tflop / mxfp4_ms / ceilings.fp8_tflops_sustained, None,
                        ctx.command("mxfp4", f"prefill {name}")))
    def fallback():  # after every in-span case, as the decode one
        widen_spans(keys[1], 1024)
        check(f"{name} fallback")
        fallback_ms = graph_ms(scoring, 1, iters, warm)
        later["fallback"].append(Row(f"prefill {name} scoring, 1/1024 keys out of span",
                                     fallback_ms, mxfp4_ms, tflop / fallback_ms,
                                     tflop / fallback_ms / ceilings.fp8_tflops_sustained, None,
                                     ctx.command("mxfp4", f"prefill {name}")))
        # The fused indexer: a key out of span sends every row to the dense fallback.
        fused_ms = graph_ms(indexer("fused"), 1, iters, warm)
        later["fallback"].append(Row(
            f"prefill {name} indexer k={k}, fused path, 1/1024 keys out of span", fused_ms,
            indexer_ms, tflop / fused_ms, tflop / fused_ms / ceilings.fp8_tflops_sustained, None,
            ctx.command("mxfp4", f"prefill {name}")))

    later["fallback runs"].append(fallback)


def run(ctx):
    import flashindexer as fi

    torch.manual_seed(0)
    ceilings = ctx.gpu_ceilings()
    notes = ("MXFP4 scale bytes 2^-4..2^3 (in span), clean=False, CUDA-graph replay after "
             f"{ctx.warm_ms} ms of replays; decode: page 64 in V4's FP8-sized pages (68 of 132 "
             "bytes per key used), shuffled pages, equal lengths, next_n 1, graphs of 10 calls.")
    decode_table = Table("GPU MXFP4 decode (paged_mqa_logits, indexer_decode)", "ms",
                         "FP8, ours", "GB/s", "device copy (sustained)",
                         command=ctx.command("mxfp4"),
                         notes=notes + " Rate: MXFP4 K cache bytes read / time. The peer is our "
                                       "FP8 op at the same shape (132 bytes per key); peer / ours "
                                       "is the MXFP4 speed-up.")
    prefill_table = Table("GPU MXFP4 prefill (mqa_logits, indexer_prefill)", "ms",
                          "FP8 scoring, ours", "TFLOP/s", "FP8 GEMM (sustained)",
                          command=ctx.command("mxfp4"),
                          notes=notes + " Causal-suffix rows. The scoring row's peer is our FP8 "
                                        "mqa_logits; the indexer row's is the faster MXFP4 scoring "
                                        "alone, with a workspace (the indexer's own "
                                        "workspace holds its converted operands).")
    torch_table = Table("GPU MXFP4 scoring against PyTorch", "ms", "PyTorch", "GB/s or TFLOP/s",
                        "device copy / FP8 GEMM (sustained)", command=ctx.command("mxfp4"),
                        notes=notes + " PyTorch: bf16 matmul + relu + weighted head sum on the "
                                      "dequantized MXFP4 operands (eager).")
    fallback_table = Table("GPU MXFP4 exact fallback", "ms", "in span, ours", "GB/s or TFLOP/s",
                           "device copy / FP8 GEMM (sustained)", command=ctx.command("mxfp4"),
                           notes=notes + " One key in 1024 gets block scales 17 binades apart; "
                                         "the fix-up kernel recomputes its logits, and every row "
                                         "of the fused indexer meets such a key and takes its "
                                         "dense fallback. The peer is the same call with every "
                                         "key in span.")
    later = {"torch": [], "fallback": [], "fallback runs": []}
    ctx.start(decode_table)
    for case in decode_cases(ctx.preset):
        if cases.selected(ctx.only, f"decode H{case.heads} {case.batch}x{case.ctx}"):
            _decode_case(ctx, fi, case, decode_table, later, ceilings)
            torch.cuda.empty_cache()
    ctx.start(prefill_table)
    for case in prefill_cases(ctx.preset):
        if cases.selected(ctx.only, f"prefill H{case.heads} {case.rows}x{case.keys}"):
            _prefill_case(ctx, fi, case, prefill_table, later, ceilings)
            torch.cuda.empty_cache()
    for fallback in later["fallback runs"]:
        fallback()
    later["fallback runs"].clear()  # their inputs
    torch.cuda.empty_cache()
    for table, rows in ((torch_table, later["torch"]), (fallback_table, later["fallback"])):
        ctx.start(table)
        for row in rows:
            table.add(row)
    return [decode_table, prefill_table, torch_table, fallback_table]
