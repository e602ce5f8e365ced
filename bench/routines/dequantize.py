# SPDX-License-Identifier: Apache-2.0
"""GPU dequantize_k_fp8 against PyTorch's values.float() * scales[:, None] on the same keys.

Rate: bytes moved by the op's definition (1 B in and 4 B out per value, 4 B per scale) / time,
against the same-run device copy (burst, read + write). CUDA events, median of N, warm L2.
"""
import torch

from .. import cases
from ..report import Row, Table
from ..timing import event_median_ms


def _measure_case(ctx, fi, case, table, ceilings):
    codes = torch.randint(0, 256, (case.keys, 128), dtype=torch.uint8, device="cuda")
    codes[(codes & 0x7F) == 0x7F] = 0  # no NaN codes: the outputs compare with equal
    values = codes.view(torch.float8_e4m3fn)
    scales = torch.rand(case.keys, device="cuda") + 0.5
    out = torch.empty(case.keys, 128, device="cuda")
    peer_out = torch.empty_like(out)
    fi.dequantize_k_fp8(values, scales, out=out)
    torch.mul(values.float(), scales[:, None], out=peer_out)
    torch.cuda.synchronize()
    assert torch.equal(out, peer_out), f"{case.name}: differs from PyTorch"
    iters = ctx.iters(50)
    ms = event_median_ms(lambda: fi.dequantize_k_fp8(values, scales, out=out), iters)
    peer_ms = event_median_ms(
        lambda: torch.mul(values.float(), scales[:, None], out=peer_out), iters)
    gbs = (case.keys * 128 * 5 + case.keys * 4) / ms / 1e6
    table.add(Row(case.name, ms, peer_ms, gbs, gbs / ceilings.copy_gbs, None,
                  ctx.command("dequantize", case.name)))


def run(ctx):
    import flashindexer as fi

    ceilings = ctx.gpu_ceilings()
    table = Table("GPU FP8 dequantize (dequantize_k_fp8)", "ms", "PyTorch", "GB/s",
                  "device copy", command=ctx.command("dequantize"),
                  notes="Random e4m3 codes x 128, fp32 scales, fp32 output; eager calls, "
                        "CUDA events.")
    ctx.start(table)
    for case in cases.dequantize(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        _measure_case(ctx, fi, case, table, ceilings)
        torch.cuda.empty_cache()
    return [table]
