# SPDX-License-Identifier: Apache-2.0
"""GPU query quantization (quantize_query_fp8, quantize_query_mxfp4), with and without the fused
RoPE, for 16K tokens x 64 heads x 128 bf16, against the same formulas written in PyTorch and a
device copy of the same bytes, in the same run.

Rate: the bytes the op must move (bf16 q and f32 weights read, int64 positions read with RoPE;
the codes, MXFP4 scales and f32 folded weights written) / time; the copy moves as many bytes.
CUDA-graph replays, median of N, L2 flushed before each. Each case first checks ours against the
PyTorch version, byte for byte.
"""
from collections import namedtuple

import torch

from .. import cases
from ..report import Row, Table
from ..timing import L2Flush, graph_ms
from .kcache import _copy_ms, _e2m1_codes, _pow2, _pow2_ceil_exponent

QueryCase = namedtuple("QueryCase", "name format rope tokens heads")
D = 128
EPS = 1e-10


def query_cases(preset):
    tokens = 16384 if preset == "full" else 2048
    label = f"{tokens // 1024}K x 64 heads"
    return [QueryCase(f"query {fmt} {label}" + (" + RoPE" if rope else ""), fmt, rope, tokens, 64)
            for fmt in ("fp8", "mxfp4") for rope in (False, True)]


def torch_rope(q, table, positions):
    """NeoX RoPE on the first 64 dims in fp32, rounded to bf16 (spec §2.2)."""
    rows = table[positions][:, None, :]
    cos, sin = rows[..., :32], rows[..., 32:]
    x = q.float()
    x0, x1 = x[..., :32], x[..., 32:64]
    r0 = (x0 * cos - x1 * sin).to(torch.bfloat16)
    r1 = (x1 * cos + x0 * sin).to(torch.bfloat16)
    return torch.cat([r0, r1, q[..., 64:]], dim=-1)


def torch_query(q, weights, fmt, weight_scale, table=None, positions=None):
    if table is not None:
        q = torch_rope(q, table, positions)
    x = q.float()
    if fmt == "fp8":
        amax = x.abs().amax(dim=-1).clamp_min(EPS)
        sigma = _pow2(_pow2_ceil_exponent(amax / 448.0))
        values = (x / sigma[..., None]).to(torch.float8_e4m3fn)
        return values, (weights * sigma) * weight_scale
    t, h, _ = x.shape
    blocks = x.view(t, h, D // 32, 32)
    amax = blocks.abs().amax(dim=-1).clamp_min(6.0 * 2.0**-126)
    exponent = _pow2_ceil_exponent(amax / 6.0).clamp(-127, 127)
    scaled = blocks / _pow2(exponent)[..., None]
    codes = (_e2m1_codes(scaled.abs()) | (torch.signbit(scaled).to(torch.uint8) << 3)).view(t, h, D)
    values = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return (values, (exponent + 127).to(torch.uint8)), weights * weight_scale


def query_inputs(tokens, heads):
    """The cases' inputs: bf16 q [T, H, D], f32 weights [T, H], an f32 cos/sin cache of 8192
    positions (NeoX halves) and a random position in it for each token."""
    q = torch.randn(tokens, heads, D, device="cuda", dtype=torch.bfloat16) * 3
    weights = torch.randn(tokens, heads, device="cuda")
    angles = torch.arange(8192, device="cuda")[:, None] * 10000.0 ** (
        -torch.arange(32, device="cuda") / 32.0)
    cos_sin = torch.cat([angles.cos(), angles.sin()], dim=1).float()
    positions = torch.randint(0, 8192, (tokens,), device="cuda")
    return q, weights, cos_sin, positions


def _measure_case(ctx, fi, case, table, flush):
    t, h = case.tokens, case.heads
    q, weights, cos_sin, positions = query_inputs(t, h)
    rope = fi.Rope("neox", "first64", cos_sin, positions) if case.rope else None
    weight_scale = fi.default_query_weight_scale(D, h)
    peer_args = (cos_sin, positions) if case.rope else ()
    holder = {}

    if case.format == "fp8":
        out = (torch.empty(t, h, D, device="cuda", dtype=torch.float8_e4m3fn),
               torch.empty(t, h, device="cuda"))

        def run_ours():
            fi.quantize_query_fp8(q, weights, eps=EPS, rope=rope, out=out)
    else:
        out = (torch.empty(t, h, D // 2, device="cuda", dtype=torch.uint8),
               torch.empty(t, h, D // 32, device="cuda", dtype=torch.uint8),
               torch.empty(t, h, device="cuda"))

        def run_ours():
            fi.quantize_query_mxfp4(q, weights, rope=rope, out=out)

    def run_peer():
        holder["result"] = torch_query(q, weights, case.format, weight_scale, *peer_args)

    run_ours()
    run_peer()
    torch.cuda.synchronize()
    got = holder["result"]
    if case.format == "fp8":
        assert torch.equal(out[0].view(torch.uint8), got[0].view(torch.uint8)), \
            f"{case.name}: values differ from PyTorch"
        assert torch.equal(out[1], got[1]), f"{case.name}: weights differ from PyTorch"
        written = t * h * (D + 4)
    else:
        assert torch.equal(out[0], got[0][0]) and torch.equal(out[1], got[0][1]), \
            f"{case.name}: values or scales differ from PyTorch"
        assert torch.equal(out[2], got[1]), f"{case.name}: weights differ from PyTorch"
        written = t * h * (D // 2 + D // 32 + 4)
    moved = t * h * (2 * D + 4) + written + (t * 8 if case.rope else 0)
    iters = ctx.iters(30)
    ms = graph_ms(run_ours, 1, iters, before=flush)
    peer_ms = graph_ms(run_peer, 1, iters, before=flush)
    copy_ms = _copy_ms(moved, iters, flush)
    gbs = moved / ms / 1e6
    table.add(Row(case.name, ms, peer_ms, gbs, copy_ms / ms, None, ctx.command("query", case.name)))


def run(ctx):
    import flashindexer as fi

    table = Table("GPU query quantization (quantize_query_fp8, quantize_query_mxfp4)", "ms",
                  "PyTorch", "GB/s", "same-bytes copy", command=ctx.command("query"),
                  notes="bf16 q [T, 64, 128], f32 weights; RoPE: NeoX on the first 64 dims from "
                        "an f32 cos/sin cache. CUDA-graph replays, L2 flushed before each; the "
                        "copy moves the same bytes in the same run.")
    ctx.start(table)
    flush = L2Flush()
    for case in query_cases(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        _measure_case(ctx, fi, case, table, flush)
        torch.cuda.empty_cache()
    return [table]
