# SPDX-License-Identifier: Apache-2.0
"""The GPU indexer (indexer_prefill, indexer_decode), fused and dense paths, against the dense
pair (our scoring into a full logits tensor, then our top-k) and the same-run bound of any
dense peer: the scoring at the same-run ceiling (FP8 GEMM for prefill, the K cache read at the
copy rate for decode) plus torch.topk on the same logits, measured.

Every case first checks that both paths return exactly the dense pair's indices (sorted). Times:
CUDA-graph replay (GPU time, no launch cost) after --warm-ms of replays, median of N, warm L2,
with a preallocated workspace of indexer_cuda_workspace_size(k) bytes.
"""
import torch

from .. import cases
from ..inputs import DecodeInputs, PrefillInputs
from ..report import Row, Table
from ..timing import graph_ms

PATHS = ("fused", "dense")


def path_options(path):
    """The keyword arguments that choose the indexer's CUDA path ("auto", "dense", "fused"):
    the one place that spells the module's path option."""
    return {"path": path}


def _measure(ctx, name, indexer, run_logits, run_topk, logits, ranges, k, batch):
    """{path: ms} for both indexer paths and the dense pair, plus torch.topk's ms, after
    checking that every path returns the dense pair's indices."""
    import flashindexer as fi

    run_logits()
    expected = fi.topk_per_row(logits, k, sorted=True, **ranges)
    for path in PATHS:
        got = indexer(sorted=True, **path_options(path))
        torch.cuda.synchronize()
        assert torch.equal(got, expected), f"{name}: the {path} path differs from the dense pair"
    out = torch.empty_like(expected)
    iters, warm = ctx.iters(10), ctx.warm_ms
    times = {path: graph_ms(lambda p=path: indexer(out=out, **path_options(p)), batch, iters,
                            warm) for path in PATHS}
    times["pair"] = graph_ms(lambda: (run_logits(), run_topk(out)), batch, iters, warm)
    times["torch.topk"] = graph_ms(lambda: torch.topk(logits, k, dim=1, sorted=False), batch,
                                   iters, warm)
    return times


def _rows(ctx, table, case, times, work, rate_of, ceiling, floor_ms, label):
    peer = floor_ms + times["torch.topk"]
    names = {"fused": "fused", "dense": "dense", "pair": "dense pair (scoring + top-k ops)"}
    for key, what in names.items():
        ms = times[key]
        rate = rate_of(work, ms)
        headline = f"{case.headline} {what}" if case.headline and key != "pair" else None
        anchor = case.anchor if key != "pair" else None
        table.add(Row(f"{case.name} {what}", ms, peer, rate, rate / ceiling, anchor,
                      ctx.command("indexer", f"{label} {case.name}"), headline))


def _prefill_case(ctx, fi, k, case, table, ceilings):
    inputs = PrefillInputs(case.heads, case.rows, case.keys, case.pattern)
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8,
                            device="cuda")
    logits = torch.full((case.rows, case.keys), float("-inf"), device="cuda")
    ranges = {"ks": inputs.ks, "ke": inputs.ke}
    topk_workspace = torch.empty(
        max(fi.topk_per_row_cuda_workspace_size(case.rows, case.keys, k), 16),
        dtype=torch.uint8, device="cuda")

    def indexer(sorted=False, out=None, **options):
        return fi.indexer_prefill(inputs.q, (inputs.keys, inputs.kscale), inputs.weights,
                                  inputs.ks, inputs.ke, k, sorted=sorted, out=out,
                                  workspace=workspace, **options)

    def run_logits():
        fi.mqa_logits(inputs.q, (inputs.keys, inputs.kscale), inputs.weights, inputs.ks,
                      inputs.ke, clean=False, out=logits)

    def run_topk(out):
        fi.topk_per_row(logits, k, out=out, workspace=topk_workspace, **ranges)

    times = _measure(ctx, case.name, indexer, run_logits, run_topk, logits, ranges, k, 1)
    flop = 2 * inputs.visible_pairs() * case.heads * 128
    floor_ms = flop / ceilings.fp8_tflops_sustained / 1e9
    _rows(ctx, table, case if k == cases.K else case._replace(anchor=None), times, flop,
          lambda work, ms: work / ms / 1e9, ceilings.fp8_tflops_sustained, floor_ms,
          "prefill")


def prefill(ctx, fi, k):
    ceilings = ctx.gpu_ceilings()
    table = Table(f"GPU indexer prefill (indexer_prefill, k = {k})", "ms",
                  "FP8-ceiling scoring + torch.topk", "TFLOP/s", "FP8 GEMM (sustained)",
                  "DeepGEMM + torch.topk", command=ctx.command("indexer"),
                  notes="Causal-suffix rows. Rate: 2 * visible pairs * H * 128 FLOP / time.")
    ctx.start(table)
    for case in cases.prefill_indexer(ctx.preset):
        if not cases.selected(ctx.only, "prefill " + case.name):
            continue
        _prefill_case(ctx, fi, k, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def _decode_case(ctx, fi, k, case, table, ceilings):
    inputs = DecodeInputs(case.heads, case.batch, case.ctx, case.next_n, case.ragged)
    cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
    row_lens = inputs.lens2d.reshape(-1).contiguous()
    logits = torch.full((case.batch * case.next_n, inputs.width), float("-inf"),
                        device="cuda")
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8,
                            device="cuda")
    topk_workspace = torch.empty(
        max(fi.topk_per_row_cuda_workspace_size(logits.shape[0], logits.shape[1], k), 16),
        dtype=torch.uint8, device="cuda")

    def indexer(sorted=False, out=None, **options):
        return fi.indexer_decode(inputs.q, cache, inputs.weights, inputs.lens, inputs.table,
                                 k, sorted=sorted, out=out, workspace=workspace, **options)

    def run_logits():
        fi.paged_mqa_logits(inputs.q, cache, inputs.weights, inputs.lens, inputs.table,
                            clean=False, out=logits)

    def run_topk(out):
        fi.topk_per_row(logits, k, lengths=row_lens, out=out, workspace=topk_workspace)

    times = _measure(ctx, case.name, indexer, run_logits, run_topk, logits,
                     {"lengths": row_lens}, k, 10)
    k_bytes = int(inputs.lens.long().sum()) * 132
    floor_ms = k_bytes / ceilings.copy_gbs_sustained / 1e6
    _rows(ctx, table, case if k == cases.K else case._replace(anchor=None), times, k_bytes,
          lambda work, ms: work / ms / 1e6, ceilings.copy_gbs_sustained, floor_ms, "decode")


def decode(ctx, fi, k):
    ceilings = ctx.gpu_ceilings()
    table = Table(f"GPU indexer decode (indexer_decode, k = {k})", "ms",
                  "copy-ceiling K read + torch.topk", "GB/s", "device copy (sustained)",
                  "DeepGEMM + torch.topk", command=ctx.command("indexer"),
                  notes="Page 64, shuffled pages, equal lengths, next_n 1; graphs of 10 calls. "
                        "Rate: K cache bytes read (132 per visible key) / time.")
    ctx.start(table)
    for case in cases.decode_indexer(ctx.preset):
        if not cases.selected(ctx.only, "decode " + case.name):
            continue
        _decode_case(ctx, fi, k, case, table, ceilings)
        torch.cuda.empty_cache()
    return table


def run(ctx):
    import flashindexer as fi

    torch.manual_seed(0)
    k = ctx.k
    return [prefill(ctx, fi, k), decode(ctx, fi, k)]
