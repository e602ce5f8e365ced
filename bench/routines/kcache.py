# SPDX-License-Identifier: Apache-2.0
"""GPU insert_k_cache and gather_k_workspace (FP8 and MXFP4, D = 128, pages of 64 keys in a
shuffled order) against the same operations written in PyTorch, and a device copy of the same
bytes, all in the same run.

Rate: the bytes each op must move (insert: the bf16 keys and int64 slots read, the quantized key
and its scale written; gather: the quantized key and scale read and written) / time. The copy
moves the same number of bytes (half read, half written) with `dst.copy_(src)`. Every timing is
a CUDA-graph replay, median of N, with the L2 flushed before each replay (the 64K-key cases fit
in L2 otherwise). Each case first checks ours against the PyTorch version, byte for byte.
"""
from collections import namedtuple

import torch

from .. import cases
from ..report import Row, Table
from ..timing import L2Flush, graph_ms

KCacheCase = namedtuple("KCacheCase", "name op format keys")
PAGE = 64
D = 128


def kcache_cases(preset):
    sizes = [(1 << 16, "64K"), (1 << 20, "1M")] if preset == "full" else [(1 << 16, "64K")]
    return [KCacheCase(f"{op} {fmt} {label} keys", op, fmt, n)
            for op in ("insert", "gather") for fmt in ("fp8", "mxfp4") for n, label in sizes]


def _pow2_ceil_exponent(x):
    mantissa, exponent = torch.frexp(x)
    return exponent - (mantissa == 0.5).to(exponent.dtype)


def _pow2(exponent):
    """2^e as float32, built on the bits (exact; e in [-126, 127])."""
    return ((exponent.to(torch.int32) + 127) << 23).view(torch.float32)


def _e2m1_codes(a):
    """E2M1 magnitude index of |x| >= 0 (nearest even, saturating), by its thresholds."""
    index = torch.zeros_like(a, dtype=torch.uint8)
    for threshold, inclusive in ((0.25, False), (0.75, True), (1.25, False), (1.75, True),
                                 (2.5, False), (3.5, True), (5.0, False)):
        index += (a >= threshold if inclusive else a > threshold).to(torch.uint8)
    return index


def torch_quantize(keys, fmt):
    """(value bytes [N, vb], scale bytes [N, 4]) of spec §3.2 / §3.3 in PyTorch ops."""
    x = keys.float()
    if fmt == "fp8":
        amax = x.abs().amax(dim=-1).clamp_min(1e-4)
        scale = _pow2(_pow2_ceil_exponent(amax / 448.0))
        values = (x / scale[:, None]).to(torch.float8_e4m3fn).view(torch.uint8)
        return values, scale.view(torch.uint8).view(-1, 4)
    blocks = x.view(x.shape[0], D // 32, 32)
    amax = blocks.abs().amax(dim=-1).clamp_min(6.0 * 2.0**-126)
    exponent = _pow2_ceil_exponent(amax / 6.0).clamp(-127, 127)
    scaled = blocks / _pow2(exponent)[..., None]
    codes = _e2m1_codes(scaled.abs()) | (torch.signbit(scaled).to(torch.uint8) << 3)
    codes = codes.view(x.shape[0], D)
    values = codes[:, 0::2] | (codes[:, 1::2] << 4)
    return values, (exponent + 127).to(torch.uint8)


class Cache:
    """A paged cache and its two regions as [pages, PAGE, bytes] views."""

    def __init__(self, fi, fmt, pages):
        self.fmt = fmt
        self.value_bytes = D if fmt == "fp8" else D // 2
        self.scale_bytes = 4
        self.paged = fi.empty_k_cache(pages, PAGE, D, fmt, like=torch.empty(0, device="cuda"))
        data = self.paged.data
        split = PAGE * self.value_bytes
        self.values = data[:, :split].view(pages, PAGE, self.value_bytes)
        self.scales = data[:, split:split + PAGE * self.scale_bytes].view(pages, PAGE, 4)


def _copy_ms(total_bytes, iters, flush):
    src = torch.empty(total_bytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    return graph_ms(lambda: dst.copy_(src), 1, iters, before=flush)


def _insert_case(ctx, fi, case, flush):
    n = case.keys
    pages = n // PAGE
    keys = torch.randn(n, D, device="cuda", dtype=torch.bfloat16) * 4
    # As an engine writes a prefill: consecutive keys fill a page, the pages in a shuffled order.
    page_order = torch.randperm(pages, device="cuda")
    key_index = torch.arange(n, device="cuda")
    slots = page_order[key_index // PAGE] * PAGE + key_index % PAGE
    ours, peer = Cache(fi, case.format, pages), Cache(fi, case.format, pages)
    page_of, row_of = slots // PAGE, slots % PAGE

    def run_ours():
        fi.insert_k_cache(ours.paged, keys, slots)

    def run_peer():
        values, scales = torch_quantize(keys, case.format)
        peer.values[page_of, row_of] = values
        peer.scales[page_of, row_of] = scales

    run_ours()
    run_peer()
    torch.cuda.synchronize()
    assert torch.equal(ours.paged.data, peer.paged.data), f"{case.name}: differs from PyTorch"
    moved = n * (D * 2 + 8 + ours.value_bytes + ours.scale_bytes)
    return run_ours, run_peer, moved


def _gather_case(ctx, fi, case, flush):
    n = case.keys
    requests = 16
    per_request = n // requests
    pages = n // PAGE
    cache = Cache(fi, case.format, pages)
    cache.paged.data.random_(0, 256)
    order = torch.randperm(pages, device="cuda", dtype=torch.int64).to(torch.int32)
    block_table = order.view(requests, per_request // PAGE)
    cu = torch.arange(0, n + 1, per_request, device="cuda", dtype=torch.int32)
    request = torch.arange(n, device="cuda") // per_request
    j = torch.arange(n, device="cuda") % per_request
    page_of = block_table[request, j // PAGE].long()
    row_of = j % PAGE
    ws = fi.gather_k_workspace(cache.paged, block_table, cu, num_keys=n)
    peer = {}

    def run_ours():
        fi.gather_k_workspace(cache.paged, block_table, cu, num_keys=n, out=ws)

    def run_peer():  # one advanced-indexing gather per region, each a new tensor
        peer["values"] = cache.values[page_of, row_of]
        peer["scales"] = cache.scales[page_of, row_of]

    run_ours()
    run_peer()
    torch.cuda.synchronize()
    assert torch.equal(ws.values.view(torch.uint8), peer["values"]), f"{case.name}: values differ"
    assert torch.equal(ws.scales.view(torch.uint8).view(n, 4), peer["scales"]), \
        f"{case.name}: scales differ"
    moved = 2 * n * (cache.value_bytes + cache.scale_bytes)
    return run_ours, run_peer, moved


def run(ctx):
    import flashindexer as fi

    table = Table("GPU K cache writes and gathers (insert_k_cache, gather_k_workspace)", "ms",
                  "PyTorch", "GB/s", "same-bytes copy", command=ctx.command("kcache"),
                  notes="bf16 keys x 128; insert: int64 slots filling pages of 64 keys in order, "
                        "the pages shuffled; gather: 16 requests over shuffled pages. CUDA-graph "
                        "replays, L2 flushed before each; the copy moves the same bytes in the "
                        "same run.")
    ctx.start(table)
    flush = L2Flush()
    iters = ctx.iters(30)
    for case in kcache_cases(ctx.preset):
        if not cases.selected(ctx.only, case.name):
            continue
        build = _insert_case if case.op == "insert" else _gather_case
        run_ours, run_peer, moved = build(ctx, fi, case, flush)
        ms = graph_ms(run_ours, 1, iters, before=flush)
        peer_ms = graph_ms(run_peer, 1, iters, before=flush)
        copy_ms = _copy_ms(moved, iters, flush)
        gbs = moved / ms / 1e6
        table.add(Row(case.name, ms, peer_ms, gbs, copy_ms / ms, None,
                      ctx.command("kcache", case.name)))
        torch.cuda.empty_cache()
    return [table]
