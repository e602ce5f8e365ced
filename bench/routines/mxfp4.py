# SPDX-License-Identifier: Apache-2.0
"""MXFP4 operands on the GPU against our FP8 ops at the same shapes, in the same run: decode
(paged_mqa_logits and indexer_decode, whatever path auto picks) and prefill (mqa_logits, and the
fused indexer_prefill against MXFP4 scoring alone).

The MXFP4 operands are random E2M1 codes with UE8M0 scale bytes in 2^-4..2^3 (any byte pattern
is valid MXFP4); the FP8 ones are the other routines' (bench/inputs.py). Each case first checks a
sample of rows against fp32 math on the dequantized operands (DeepGEMM's diff < 5e-6), and the
indexer's indices against our top-k over our MXFP4 logits. Times: CUDA-graph replay after
--warm-ms of replays (decode: graphs of 10 calls), warm L2. Decode rate: the K cache bytes read
(68 per visible key) / time, against the same-run device copy; the peer column is our FP8 op.
"""
import collections

import torch

from ..inputs import DIM, DecodeInputs, PrefillInputs, calc_diff
from ..report import Row, Table
from ..timing import graph_ms

PAGE = 64
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                     -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])

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


def dequantize(values, scales):
    """[..., 64] + [..., 4] uint8 -> [..., 128] float32 (spec §3.3)."""
    table = E2M1.to(values.device)
    low = table[(values & 15).long()]
    high = table[(values >> 4).long()]
    x = torch.stack((low, high), dim=-1).flatten(-2)
    exp = scales.float().sub(127).exp2().repeat_interleave(32, dim=-1)
    return x * exp


def mxfp4_logits(q, keys, weights):
    """fp32 math: q [r, H, 128], keys [n, 128] -> [r, n]."""
    dots = torch.einsum("rhd,nd->rhn", q, keys)
    return (dots.relu() * weights[:, :, None]).sum(dim=1)


def mxfp4_cache(inputs):
    """An MXFP4 cache with the FP8 inputs' block table and page count: pages of 64 x 68 bytes."""
    pages = inputs.total_pages
    values, scales = random_mxfp4((pages * PAGE,))
    cache = torch.empty(pages, PAGE * 68, dtype=torch.uint8, device="cuda")
    cache[:, :PAGE * 64] = values.view(pages, PAGE * 64)
    cache[:, PAGE * 64:] = scales.view(pages, PAGE * 4)
    return cache, values, scales


def _decode_case(ctx, fi, case, table, ceilings):
    inputs = DecodeInputs(case.heads, case.batch, case.ctx)
    fp8_cache = fi.PagedKCache(inputs.cache, PAGE, DIM, "fp8")
    data, k_values, k_scales = mxfp4_cache(inputs)
    cache = fi.PagedKCache(data, PAGE, DIM, "mxfp4")
    q = random_mxfp4((case.batch, 1, case.heads))
    logits = torch.empty(case.batch, inputs.width, device="cuda")
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
    assert diff < 5e-6, f"decode {case}: diff against fp32 math {diff}"

    workspace = torch.empty(fi.indexer_cuda_workspace_size(case.k), dtype=torch.uint8,
                            device="cuda")
    selected = fi.indexer_decode(q, cache, inputs.weights, inputs.lens, inputs.table, case.k,
                                 sorted=True, workspace=workspace)
    expected_topk = fi.topk_per_row(logits, case.k, sorted=True,
                                    lengths=inputs.lens2d.reshape(-1).contiguous())
    assert torch.equal(selected, expected_topk), f"decode {case}: indexer != top-k of logits"

    out = torch.empty_like(selected)
    iters, warm = ctx.iters(10), ctx.warm_ms
    times = {
        "mxfp4 scoring": graph_ms(lambda: fi.paged_mqa_logits(
            q, cache, inputs.weights, inputs.lens, inputs.table, clean=False, out=logits),
            10, iters, warm),
        "fp8 scoring": graph_ms(lambda: fi.paged_mqa_logits(
            inputs.q, fp8_cache, inputs.weights, inputs.lens, inputs.table, clean=False,
            out=logits), 10, iters, warm),
        "mxfp4 indexer": graph_ms(lambda: fi.indexer_decode(
            q, cache, inputs.weights, inputs.lens, inputs.table, case.k, out=out,
            workspace=workspace), 10, iters, warm),
        "fp8 indexer": graph_ms(lambda: fi.indexer_decode(
            inputs.q, fp8_cache, inputs.weights, inputs.lens, inputs.table, case.k, out=out,
            workspace=workspace), 10, iters, warm),
    }
    k_bytes = int(inputs.lens.long().sum()) * 68
    name = f"H{case.heads} {case.batch}x{case.ctx}"
    for what in ("scoring", "indexer"):
        ms = times[f"mxfp4 {what}"]
        gbs = k_bytes / ms / 1e6
        label = f"{name} {what}" + (f" k={case.k}" if what == "indexer" else "")
        if what == "scoring" and case.k != 2048:
            continue  # the scoring does not depend on k: one row per shape
        table.add(Row(label, ms, times[f"fp8 {what}"], gbs, gbs / ceilings.copy_gbs_sustained,
                      None, ctx.command("mxfp4", f"decode {name}"),
                      f"MXFP4 decode {label}" if case.heads == 64 and case.ctx == 131072
                      else None))


def decode(ctx, fi):
    ceilings = ctx.gpu_ceilings()
    table = Table("GPU MXFP4 decode (paged_mqa_logits, indexer_decode)", "ms",
                  "FP8, ours", "GB/s", "device copy (sustained)", command=ctx.command("mxfp4"),
                  notes="Page 64 (68 bytes per key), shuffled pages, equal lengths, next_n 1, "
                        "graphs of 10 calls; indexer: the auto path. Rate: MXFP4 K cache bytes "
                        "read / time. The peer column is our FP8 op on the same shape (132 "
                        "bytes per key); peer / ours is the MXFP4 speed-up.")
    ctx.start(table)
    for case in decode_cases(ctx.preset):
        _decode_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def _prefill_case(ctx, fi, case, table, ceilings):
    fp8 = PrefillInputs(case.heads, case.rows, case.keys)
    q = random_mxfp4((case.rows, case.heads))
    keys = random_mxfp4((case.keys,))
    logits = torch.empty(case.rows, case.keys, device="cuda")
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
    assert diff < 5e-6, f"prefill {case}: diff against fp32 math {diff}"
    k = 2048
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8, device="cuda")
    selected = fi.indexer_prefill(q, keys, fp8.weights, fp8.ks, fp8.ke, k, sorted=True,
                                  workspace=workspace, path="fused")
    assert torch.equal(selected, fi.topk_per_row(logits, k, sorted=True, ks=fp8.ks, ke=fp8.ke)), \
        f"prefill {case}: fused indexer != top-k of logits"
    out = torch.empty_like(selected)
    iters, warm = ctx.iters(5), ctx.warm_ms
    mxfp4_ms = graph_ms(lambda: fi.mqa_logits(q, keys, fp8.weights, fp8.ks, fp8.ke, clean=False,
                                              out=logits), 1, iters, warm)
    fp8_ms = graph_ms(lambda: fi.mqa_logits(fp8.q, (fp8.keys, fp8.kscale), fp8.weights, fp8.ks,
                                            fp8.ke, clean=False, out=logits), 1, iters, warm)
    fused_ms = graph_ms(lambda: fi.indexer_prefill(q, keys, fp8.weights, fp8.ks, fp8.ke, k,
                                                   out=out, workspace=workspace, path="fused"),
                        1, iters, warm)
    flop = 2 * fp8.visible_pairs() * case.heads * DIM
    name = f"H{case.heads} {case.rows}x{case.keys}"
    for label, ms, peer in ((f"{name} scoring", mxfp4_ms, fp8_ms),
                            (f"{name} fused indexer k={k} (peer: MXFP4 scoring)", fused_ms,
                             mxfp4_ms)):
        tflops = flop / ms / 1e9
        table.add(Row(label, ms, peer, tflops, tflops / ceilings.fp8_tflops_sustained, None,
                      ctx.command("mxfp4", f"prefill {name}"), None))


def prefill(ctx, fi):
    ceilings = ctx.gpu_ceilings()
    table = Table("GPU MXFP4 prefill (mqa_logits, fused indexer_prefill)", "ms",
                  "FP8 scoring, ours", "TFLOP/s", "FP8 GEMM (sustained)",
                  command=ctx.command("mxfp4"),
                  notes="Causal-suffix rows, clean=False. The scoring row's peer is our FP8 "
                        "mqa_logits on the same shape; the fused row's peer is the MXFP4 scoring "
                        "alone. Rate: 2 * visible pairs * H * 128 FLOP / time.")
    ctx.start(table)
    for case in prefill_cases(ctx.preset):
        _prefill_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def run(ctx):
    import flashindexer as fi

    torch.manual_seed(0)
    return [decode(ctx, fi), prefill(ctx, fi)]
