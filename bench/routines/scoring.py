# SPDX-License-Identifier: Apache-2.0
"""GPU FP8 scoring: mqa_logits (prefill) and paged_mqa_logits (decode) against PyTorch computing
the same formula on the same FP8 operands, and against the same-run ceilings.

Each case first checks a sample of rows with DeepGEMM's metric diff = 1 - 2 sum(xy) /
sum(x^2 + y^2) against fp32 math on the dequantized FP8 inputs (< 5e-6). Ours is timed as the
replay of a CUDA graph of several calls (GPU time, no host launch cost) after --warm-ms of
replays, so that it and the sustained ceilings run at the clocks of sustained load;
clean=False (the logits the peers write), warm L2. The PyTorch peer is what a framework user
writes: bf16 matmuls over row chunks, relu, the weighted head sum and the key scales (eager,
CUDA events). Prefill rate: 2 * visible pairs * H * 128 FLOP / time, against the FP8 GEMM;
decode rate: the K cache bytes read (132 per visible key) / time, against the device copy.
"""
import torch

from .. import cases
from ..inputs import DecodeInputs, PrefillInputs, calc_diff, row_logits
from ..report import Row, Table
from ..timing import event_median_ms, graph_ms

CHUNK_BYTES = 1 << 30  # the PyTorch peer's [rows, H, keys] intermediate per chunk


def torch_scores(q, weights, keys, kscale, out, ks=None, ke=None):
    """The PyTorch peer: logits of q [rows, H, D] against keys [n, D] (bf16 matmul over row
    chunks), masked to [ks, ke) when given."""
    rows, heads, dim = q.shape
    n = keys.shape[0]
    keys_t = keys.to(torch.bfloat16).t()
    step = max(1, CHUNK_BYTES // (2 * heads * n))
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        scores = (q[begin:end].to(torch.bfloat16).reshape(-1, dim) @ keys_t).view(end - begin,
                                                                                  heads, n)
        scores = (scores.relu_() * weights[begin:end, :, None].to(torch.bfloat16)).sum(1)
        out[begin:end] = scores.float() * kscale[None, :]
    if ks is not None:
        columns = torch.arange(n, device=q.device)
        out.masked_fill_((columns < ks[:, None]) | (columns >= ke[:, None]), float("-inf"))


def _check_prefill(name, inputs, logits, samples):
    got, sim = [], []
    for r in torch.randperm(inputs.rows)[:samples].tolist():
        lo, hi = int(inputs.ks[r]), int(inputs.ke[r])
        got.append(logits[r, lo:hi])
        sim.append(row_logits(inputs.q[r:r + 1], inputs.weights[r:r + 1], inputs.keys[lo:hi],
                              inputs.kscale[lo:hi])[0])
    diff = calc_diff(torch.cat(got), torch.cat(sim))
    assert diff < 5e-6, f"{name}: diff against fp32 math {diff}"


def _check_decode(name, inputs, logits, samples):
    got, sim = [], []
    for b in torch.randperm(inputs.batch)[:samples].tolist():
        slots = inputs.slots(b)
        for j in range(inputs.next_n):
            r = b * inputs.next_n + j
            end = int(inputs.lens2d[b, j])
            got.append(logits[r, :end])
            sim.append(row_logits(inputs.q[b, j][None], inputs.weights[r:r + 1],
                                  inputs.k[slots[:end]], inputs.kscale[slots[:end]])[0])
    diff = calc_diff(torch.cat(got), torch.cat(sim))
    assert diff < 5e-6, f"{name}: diff against fp32 math {diff}"


def _prefill_case(ctx, fi, case, table, ceilings):
    inputs = PrefillInputs(case.heads, case.rows, case.keys, case.pattern)
    logits = torch.empty(case.rows, case.keys, device="cuda")
    operands = (inputs.q, (inputs.keys, inputs.kscale), inputs.weights, inputs.ks, inputs.ke)

    def ours():
        fi.mqa_logits(*operands, clean=False, out=logits)

    fi.mqa_logits(*operands, clean=True, out=logits)
    torch.cuda.synchronize()
    _check_prefill(case.name, inputs, logits, 6)
    ms = graph_ms(ours, 3, ctx.iters(10), ctx.warm_ms)
    peer_out = torch.empty_like(logits)
    peer_ms = event_median_ms(lambda: torch_scores(inputs.q, inputs.weights, inputs.keys,
                                                   inputs.kscale, peer_out, inputs.ks,
                                                   inputs.ke), ctx.iters(3), warmup=1)
    tflops = 2 * inputs.visible_pairs() * case.heads * 128 / ms / 1e9
    table.add(Row(case.name, ms, peer_ms, tflops, tflops / ceilings.fp8_tflops_sustained,
                  case.anchor, ctx.command("scoring", "prefill " + case.name),
                  case.headline))


def prefill(ctx, fi):
    ceilings = ctx.gpu_ceilings()
    table = Table("GPU prefill scoring (mqa_logits)", "ms", "PyTorch", "TFLOP/s",
                  "FP8 GEMM (sustained)", "DeepGEMM", command=ctx.command("scoring"),
                  notes="Causal-suffix rows unless named, clean=False, CUDA-graph replay after "
                        f"{ctx.warm_ms} ms of replays; PyTorch: bf16 matmul + relu + weighted "
                        "head sum on the same FP8 operands.")
    ctx.start(table)
    for case in cases.prefill_scoring(ctx.preset):
        if not cases.selected(ctx.only, "prefill " + case.name):
            continue
        _prefill_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def _decode_case(ctx, fi, case, table, ceilings):
    inputs = DecodeInputs(case.heads, case.batch, case.ctx, case.next_n, case.ragged)
    cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
    logits = torch.empty(case.batch * case.next_n, inputs.width, device="cuda")

    def ours(clean=False):
        fi.paged_mqa_logits(inputs.q, cache, inputs.weights, inputs.lens2d, inputs.table,
                            clean=clean, out=logits)

    ours(clean=True)
    torch.cuda.synchronize()
    _check_decode(case.name, inputs, logits, 4)
    ms = graph_ms(ours, 10, ctx.iters(10), ctx.warm_ms)
    slots = [inputs.slots(b) for b in range(case.batch)]
    peer_out = torch.empty_like(logits)

    def peer():
        for b, rows in enumerate(slots):
            n = rows.numel()
            r = slice(b * case.next_n, (b + 1) * case.next_n)
            torch_scores(inputs.q[b], inputs.weights[r], inputs.k[rows], inputs.kscale[rows],
                         peer_out[r, :n])

    peer_ms = event_median_ms(peer, ctx.iters(3), warmup=1)
    k_bytes = int(inputs.lens.long().sum()) * 132
    gbs = k_bytes / ms / 1e6
    table.add(Row(case.name, ms, peer_ms, gbs, gbs / ceilings.copy_gbs_sustained,
                  case.anchor, ctx.command("scoring", "decode " + case.name),
                  case.headline))


def decode(ctx, fi):
    ceilings = ctx.gpu_ceilings()
    table = Table("GPU decode scoring (paged_mqa_logits)", "ms", "PyTorch", "GB/s",
                  "device copy (sustained)", "DeepGEMM", command=ctx.command("scoring"),
                  notes="Page 64, shuffled pages, equal lengths unless ragged, clean=False, "
                        "CUDA-graph replay of 10 calls (warm L2) after "
                        f"{ctx.warm_ms} ms of replays; rate: K cache bytes read / time. "
                        "PyTorch: the keys gathered through the block table, then the prefill "
                        "peer's formula per request.")
    ctx.start(table)
    for case in cases.decode_scoring(ctx.preset):
        if not cases.selected(ctx.only, "decode " + case.name):
            continue
        _decode_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def run(ctx):
    import flashindexer as fi

    torch.manual_seed(0)
    return [prefill(ctx, fi), decode(ctx, fi)]
