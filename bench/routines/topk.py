# SPDX-License-Identifier: Apache-2.0
"""GPU topk_per_row against torch.topk(sorted=False) on the same fp32 / bf16 logits.

Each case first checks ours against torch.topk on a few rows (the same selected values; for
distinct fp32 values the same indices) and that a repeated call gives the same bits, then
times both as CUDA-graph replays (GPU time, no host launch cost) with CUDA events, L2 flushed
before every replay (the logits come from HBM, as after the scoring kernel in a model step).
Rate: logits bytes / our time, against the same-run device copy (burst; read + write bytes
counted, so it is HBM's rate, which one read of the logits can reach: 1.0 is the floor).
"""
import torch

from .. import cases
from ..report import Row, Table
from ..timing import L2Flush, graph_ms

TITLE = "GPU top-k (topk_per_row)"


def _check(logits, out, k, rows_to_check):
    for r in rows_to_check:
        ours = out[r].long()
        assert int((ours < 0).sum()) == 0, f"row {r}: -1 in a full row"
        assert ours.unique().numel() == k, f"row {r}: duplicate indices"
        ref_vals, ref_idx = torch.topk(logits[r].float(), k, sorted=True)
        our_vals = logits[r].float()[ours].sort(descending=True).values
        assert torch.equal(our_vals, ref_vals), f"row {r}: selected values differ from torch.topk"
        if logits.dtype == torch.float32 and ref_vals.unique().numel() == k:
            assert torch.equal(ours.sort().values, ref_idx.sort().values), f"row {r}: indices"


def _measure_case(ctx, fi, case, table, flush, ceilings):
    dtype = torch.bfloat16 if case.dtype == "bf16" else torch.float32
    logits = torch.randn(case.rows, case.width, device="cuda")
    if case.dist == "shifted":
        logits += 100.0
    elif case.dist == "ties":
        logits = logits.round(decimals=1)
    logits = logits.to(dtype)
    out = torch.empty(case.rows, case.k, dtype=torch.int32, device="cuda")
    if case.form == "prefill":
        ranges = {"ks": torch.zeros(case.rows, dtype=torch.int32, device="cuda"),
                  "ke": torch.full((case.rows,), case.width, dtype=torch.int32,
                                   device="cuda")}
    else:
        ranges = {"lengths": torch.full((case.rows,), case.width, dtype=torch.int32,
                                        device="cuda")}
    size = fi.topk_per_row_cuda_workspace_size(case.rows, case.width, case.k)
    workspace = torch.empty(max(size, 16), dtype=torch.uint8, device="cuda")

    def ours():
        fi.topk_per_row(logits, case.k, out=out, workspace=workspace, **ranges)

    def theirs():
        torch.topk(logits, case.k, dim=1, sorted=False)

    ours()
    torch.cuda.synchronize()
    _check(logits, out, case.k, sorted({0, case.rows // 2, case.rows - 1}))
    first = out.clone()
    ours()
    torch.cuda.synchronize()
    assert torch.equal(first, out), f"{case.name}: a repeated call gave other bits"
    iters = ctx.iters(15 if case.rows * case.width >= (1 << 26) else 60)
    ours_ms = graph_ms(ours, 1, iters, before=flush)
    theirs_ms = graph_ms(theirs, 1, iters, before=flush)
    gbs = case.rows * case.width * logits.element_size() / ours_ms / 1e6
    table.add(Row(case.name, ours_ms, theirs_ms, gbs, gbs / ceilings.copy_gbs, case.anchor,
                  ctx.command("topk", case.name), case.headline))


def run(ctx):
    import flashindexer as fi

    ceilings = ctx.gpu_ceilings()
    table = Table(TITLE, "ms", "torch.topk", "GB/s", "device copy", "best of vLLM/FlashInfer",
                  command=ctx.command("topk"),
                  notes="fp32 N(0,1) logits unless named (ties: rounded to one decimal), full "
                        "rows, unsorted output; CUDA-graph replays, CUDA events, median of N, L2 "
                        "flushed before every replay. Rate: logits bytes read / time, against "
                        "the same-run device copy (read + write bytes).")
    ctx.start(table)
    flush = L2Flush()
    torch.manual_seed(0)
    for case in cases.topk(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        _measure_case(ctx, fi, case, table, flush, ceilings)
        torch.cuda.empty_cache()
    return [table]
