# SPDX-License-Identifier: Apache-2.0
"""The oracle in NumPy, for your own tests: obviously correct, slow, no compiled code.

Accepts NumPy arrays (float8 as ml_dtypes.float8_e4m3fn or uint8 bytes) and PyTorch tensors
(any device; copied to the host), and returns NumPy arrays. It follows the C++ reference
(src/reference/): quantizers bit-exact with the library; scores accumulated in fp64 over the
exactly decoded inputs and rounded once to fp32; top-k by a full sort under the total order
(larger first, NaN below -inf, -0 == +0, ties to the smaller index), sorted, -1 tail.

The library's fp32 scores may differ from these in the last bits; compare logits with
``score_tolerance`` and selections with ``check_topk``.
"""

import numpy as np

_E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float64)


def _e4m3_table():
    codes = np.arange(256)
    exponent, mantissa = (codes >> 3) & 0xF, codes & 0x7
    magnitude = np.where(exponent == 0, mantissa * 2.0**-9,
                         (1.0 + mantissa / 8.0) * 2.0 ** (exponent - 7.0))
    magnitude[(exponent == 0xF) & (mantissa == 0x7)] = np.nan
    return np.where(codes & 0x80, -magnitude, magnitude)


E4M3_VALUES = _e4m3_table()  # float64 [256]: value of every e4m3fn byte


def numpy(x, raw_bytes=False):
    """A host NumPy view or copy of x. FP8 / bfloat16 tensors come back as their raw bits
    (uint8 / uint16) when raw_bytes, else float8 is rejected (use raw_bytes)."""
    if x is None:
        return None
    name = str(getattr(x, "dtype", "")).rpartition(".")[2]
    if type(x).__module__.startswith("torch"):
        import torch

        x = x.detach()
        if name.startswith("float8") or name.startswith("float4"):
            x = x.view(torch.uint8)
        elif name == "bfloat16":
            return x.view(torch.int16).cpu().numpy().view(np.uint16)
        return x.cpu().numpy()
    array = np.asarray(x)
    if name.startswith("float8") or name.startswith("float4"):
        return array.view(np.uint8)
    if name == "bfloat16":
        return array.view(np.uint16)
    return array


def _floats(x):
    """float64 values of a float32 / bfloat16 tensor."""
    name = str(getattr(x, "dtype", "")).rpartition(".")[2]
    array = numpy(x)
    if name == "bfloat16":
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)


# ----------------------------------------------------------------------------------------------
# Formats and quantizers (spec §3)


def decode_e4m3(codes):
    """float64 values of e4m3fn bytes."""
    return E4M3_VALUES[numpy(codes, raw_bytes=True).astype(np.intp)]


def encode_e4m3(x):
    """e4m3fn bytes of float32 values: round to nearest even, saturate to +-448, NaN -> 0x7f."""
    x = np.asarray(x, dtype=np.float32)
    magnitude = np.abs(x).astype(np.float64)
    grid = E4M3_VALUES[:127]  # codes 0..126, increasing
    upper = np.clip(np.searchsorted(grid, magnitude), 1, 126)
    lower = upper - 1
    below, above = magnitude - grid[lower], grid[upper] - magnitude
    take_upper = (above < below) | ((above == below) & (upper % 2 == 0))
    code = np.where(take_upper, upper, lower)
    code = np.where(magnitude >= 448.0, 126, code)
    code = code | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def _pow2_ceil(x):
    mantissa, exponent = np.frexp(x)
    return np.ldexp(1.0, np.where(mantissa == 0.5, exponent - 1, exponent)).astype(np.float32)


def quantize_k_fp8(x):
    """(values [N, D] uint8 e4m3, scales [N] float32), bit-exact with flashindexer."""
    x = _floats(x).astype(np.float32)
    amax = np.max(np.abs(x), axis=-1) if x.shape[-1] else np.zeros(x.shape[:-1], np.float32)
    scales = _pow2_ceil(np.maximum(amax, np.float32(1e-4)) / np.float32(448.0))
    return encode_e4m3(x / scales[..., None]), scales


def dequantize_k_fp8(values, scales):
    """float32 [N, D] = e4m3(values) * scales[:, None]."""
    return (decode_e4m3(values) * numpy(scales).astype(np.float64)[..., None]).astype(np.float32)


def encode_e2m1(x):
    """E2M1 codes (4 bits) of float32 values: nearest even, saturating to +-6, NaN -> +0."""
    x = np.asarray(x, dtype=np.float32)
    a = np.abs(x)
    index = np.select(
        [a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0], range(7), 7)
    code = index | np.where(np.signbit(x), 8, 0)
    return np.where(np.isnan(x), 0, code).astype(np.uint8)


def quantize_mxfp4(x):
    """(values [..., D/2] uint8, scales [..., D/32] uint8 UE8M0), bit-exact with flashindexer."""
    x = _floats(x).astype(np.float32)
    blocks = x.reshape(x.shape[:-1] + (x.shape[-1] // 32, 32))
    amax = np.maximum(np.max(np.abs(blocks), axis=-1), np.float32(6.0 * 2.0**-126))
    mantissa, exponent = np.frexp(amax / np.float32(6.0))
    exponent = np.clip(np.where(mantissa == 0.5, exponent - 1, exponent), -127, 127)
    scales = (exponent + 127).astype(np.uint8)
    codes = encode_e2m1(blocks / np.ldexp(np.float32(1.0), exponent)[..., None].astype(np.float32))
    codes = codes.reshape(x.shape)
    values = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return values, scales


def dequantize_mxfp4(values, scales):
    """float32 [..., D] from packed E2M1 values [..., D/2] and UE8M0 scales [..., D/32]."""
    return _mxfp4_float64(values, scales).astype(np.float32)


def _mxfp4_float64(values, scales):
    values = numpy(values, raw_bytes=True)
    scales = numpy(scales, raw_bytes=True)
    codes = np.stack([values & 0xF, values >> 4], axis=-1).reshape(values.shape[:-1] + (-1,))
    magnitudes = _E2M1[codes & 0x7] * np.where(codes & 0x8, -1.0, 1.0)
    block_scales = np.ldexp(1.0, scales.astype(np.int64) - 127)
    return magnitudes * np.repeat(block_scales, 32, axis=-1)


# ----------------------------------------------------------------------------------------------
# Scoring (spec §2.3, §2.4)


def _operand(operand, key_scales_per_row):
    """float64 values of a quantized operand and its per-row scale (FP8 keys), or 1."""
    if isinstance(operand, (tuple, list)):
        values, scales = operand
    else:
        values, scales = operand, None
    raw_values = numpy(values, raw_bytes=True)
    scales_array = numpy(scales, raw_bytes=True)
    if scales_array is not None and scales_array.dtype == np.uint8:  # MXFP4
        return _mxfp4_float64(raw_values, scales_array), None
    row_scale = None
    if key_scales_per_row and scales is not None:
        row_scale = scales_array.astype(np.float64)
    return E4M3_VALUES[raw_values.astype(np.intp)], row_scale


def _scores(q_rows, keys, key_scale, weights_rows):
    """fp64 scores [rows, N] of query rows [rows, H, D] against keys [N, D]."""
    dots = np.einsum("rhd,nd->rhn", q_rows, keys)
    scores = np.einsum("rh,rhn->rn", weights_rows, np.maximum(dots, 0.0))
    return scores if key_scale is None else scores * key_scale[None, :]


def mqa_logits(q, keys, weights, ks, ke, clean=True, chunk=64):
    """logits [M, N] float32 by the definition; -inf outside [ks, ke) when clean, NaN otherwise
    (the library leaves those columns untouched)."""
    q_values, _ = _operand(q, False)
    key_values, key_scale = _operand(keys, True)
    weights = numpy(weights).astype(np.float64)
    ks, ke = numpy(ks).astype(np.int64), numpy(ke).astype(np.int64)
    rows, keys_count = q_values.shape[0], key_values.shape[0]
    logits = np.empty((rows, keys_count), dtype=np.float32)
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        logits[start:stop] = _scores(q_values[start:stop], key_values, key_scale,
                                     weights[start:stop]).astype(np.float32)
    columns = np.arange(keys_count)[None, :]
    outside = (columns < ks[:, None]) | (columns >= ke[:, None])
    logits[outside] = -np.inf if clean else np.nan
    return logits


def decode_row_ends(context_lens, next_n):
    """Visible length of every decode row r = b * next_n + j (spec §7.3)."""
    lens = numpy(context_lens).astype(np.int64)
    if lens.ndim == 2:
        return lens.reshape(-1)
    offsets = np.arange(next_n)[None, :] - next_n + 1
    return np.maximum(lens[:, None] + offsets, 0).reshape(-1)


def read_k_cache(cache, block_table, request, length):
    """(values float64 [length, D], scale float64 [length] or None) of a request's first
    `length` context positions, read through the block table."""
    pages = numpy(cache.data).reshape(cache.data.shape[0], -1)
    table = numpy(block_table)
    d, page_size = cache.head_dim, cache.page_size
    positions = np.arange(length)
    page = table[request, positions // page_size].astype(np.int64)
    row = positions % page_size
    if cache.format == "mxfp4":
        value_bytes, scale_bytes = d // 2, d // 32
    else:
        value_bytes, scale_bytes = d, 4
    value_columns = row[:, None] * value_bytes + np.arange(value_bytes)[None, :]
    scale_columns = page_size * value_bytes + row[:, None] * scale_bytes + np.arange(scale_bytes)
    values = pages[page[:, None], value_columns]
    scales = pages[page[:, None], scale_columns]
    if cache.format == "mxfp4":
        return _mxfp4_float64(values, scales), None
    key_scales = np.ascontiguousarray(scales).view(np.float32)[:, 0].astype(np.float64)
    return E4M3_VALUES[values.astype(np.intp)], key_scales


def paged_mqa_logits(q, cache, weights, context_lens, block_table, width=None, clean=True):
    """logits [B * next_n, width] float32 by the definition (width default: P * page_size)."""
    return _paged(q, cache, weights, context_lens, block_table, width, clean, False).astype(
        np.float32)


def paged_score_tolerance(q, cache, weights, context_lens, block_table, width=None,
                          tensor_cores=False):
    """score_tolerance for paged_mqa_logits / indexer_decode: [B * next_n, width] float64."""
    q_values, _ = _operand(q, False)
    heads, d = q_values.shape[-2], cache.head_dim
    magnitude = _paged(q, cache, weights, context_lens, block_table, width, True, True)
    return _relative_bound(d, heads, tensor_cores) * np.where(np.isinf(magnitude), 0.0, magnitude)


def _paged(q, cache, weights, context_lens, block_table, width, clean, absolute):
    q_values, _ = _operand(q, False)
    batch, next_n = q_values.shape[:2]
    weights = numpy(weights).astype(np.float64)
    ends = decode_row_ends(context_lens, next_n)
    if width is None:
        width = numpy(block_table).shape[1] * cache.page_size
    logits = np.full((batch * next_n, width), -np.inf if clean else np.nan)
    for b in range(batch):
        rows = slice(b * next_n, (b + 1) * next_n)
        longest = int(ends[rows].max(initial=0))
        keys, key_scale = read_k_cache(cache, block_table, b, longest)
        operands = (q_values[b], keys, key_scale, weights[rows])
        if absolute:
            operands = tuple(None if x is None else np.abs(x) for x in operands)
        scores = _scores(*operands)
        if not absolute:
            scores = scores.astype(np.float32)
        for j in range(next_n):
            end = int(ends[b * next_n + j])
            logits[b * next_n + j, :end] = scores[j, :end]
    return logits


# ----------------------------------------------------------------------------------------------
# Selection


def order_of_row(scores):
    """Indices of a row's scores best first under the total order."""
    scores = np.asarray(scores, dtype=np.float64)
    is_nan = np.isnan(scores)
    keys = np.where(is_nan, 0.0, -scores) + 0.0  # + 0.0 folds -0 onto +0
    return np.lexsort((np.arange(scores.size), keys, is_nan))


def row_ranges(rows, ks=None, ke=None, lengths=None, next_n=1):
    """[rows, 2] int64 (start, end) of every row, as topk_per_row reads its ranges."""
    if ks is not None:
        return np.stack([numpy(ks).astype(np.int64), numpy(ke).astype(np.int64)], axis=1)
    lens = numpy(lengths).astype(np.int64)
    if lens.ndim == 2 or lens.size == rows:
        ends = lens.reshape(-1)
    else:
        ends = decode_row_ends(lens, next_n)
    return np.stack([np.zeros_like(ends), np.maximum(ends, 0)], axis=1)


def topk_per_row(logits, k, ks=None, ke=None, lengths=None, next_n=1):
    """[rows, k] int32, sorted best first, relative to the row start, -1 tail."""
    scores = _floats(logits).astype(np.float32)
    ranges = row_ranges(scores.shape[0], ks, ke, lengths, next_n)
    out = np.full((scores.shape[0], k), -1, dtype=np.int32)
    for r, (start, end) in enumerate(ranges):
        best = order_of_row(scores[r, start:end])[:k]
        out[r, :best.size] = best
    return out


def indexer_prefill(q, keys, weights, ks, ke, k):
    return topk_per_row(mqa_logits(q, keys, weights, ks, ke), k, ks=ks, ke=ke)


def indexer_decode(q, cache, weights, context_lens, block_table, k):
    logits = paged_mqa_logits(q, cache, weights, context_lens, block_table)
    q_values, _ = _operand(q, False)
    return topk_per_row(logits, k, lengths=decode_row_ends(context_lens, q_values.shape[1]))


# ----------------------------------------------------------------------------------------------
# Comparing a fast result with the oracle


def _relative_bound(d, heads, tensor_cores):
    # fp32 rounding; the CUDA kernel's FP8 tensor cores (wgmma) also sum the D products below
    # full fp32 precision: seen up to ~1e-4 of the magnitude on an H200, bounded here by 2^-11.
    return 4.0 * (d + heads + 4) * 2.0**-24 + (2.0**-11 if tensor_cores else 0.0)


def score_tolerance(q, keys, weights, head_dim=None, tensor_cores=False):
    """A bound on |fp32 score - exact score| per [row, key] of a prefill problem: the rounding of
    an fp32 evaluation, 4 (D + H + 4) 2^-24 * (|kscale| sum_h |W_h| sum_d |q_hd k_d|), plus
    2^-11 of that magnitude with tensor_cores (the CUDA scoring kernel's FP8 wgmma)."""
    q_values, _ = _operand(q, False)
    key_values, key_scale = _operand(keys, True)
    heads, d = q_values.shape[-2], head_dim or q_values.shape[-1]
    magnitude = _scores(np.abs(q_values), np.abs(key_values),
                        None if key_scale is None else np.abs(key_scale),
                        np.abs(numpy(weights).astype(np.float64)))
    return _relative_bound(d, heads, tensor_cores) * magnitude


def check_topk(selected, exact_scores, k, tolerance, starts=None):
    """Asserts that every row of `selected` (relative indices, -1 tail) holds min(n, k) distinct
    visible keys, each scoring within `tolerance` of the k-th best exact score of its row.

    exact_scores: [rows, width] float64 with -inf outside each row's range (as mqa_logits with
    clean=True); tolerance: scalar or [rows, width]; starts: row starts (ks) when indices are
    relative to them.
    """
    selected = numpy(selected)
    exact = np.asarray(exact_scores, dtype=np.float64)
    tol = np.broadcast_to(np.asarray(tolerance, dtype=np.float64), exact.shape)
    for r in range(exact.shape[0]):
        start = 0 if starts is None else int(numpy(starts)[r])
        visible = np.isfinite(exact[r]) | np.isnan(exact[r])
        n = int(visible.sum())
        chosen = selected[r, :k]
        count = min(n, k)
        assert np.all(chosen[count:] == -1), f"row {r}: expected -1 after {count} keys"
        picked = chosen[:count].astype(np.int64) + start
        assert len(set(picked.tolist())) == count, f"row {r}: repeated keys"
        assert np.all(visible[picked]), f"row {r}: a selected key is not visible"
        if count == 0:
            continue
        kth = np.sort(exact[r][visible])[::-1][count - 1]
        slack = tol[r][visible].max()
        worst = exact[r][picked].min()
        assert worst >= kth - 2 * slack, f"row {r}: key scoring {worst} < k-th best {kth}"
