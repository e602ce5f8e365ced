# SPDX-License-Identifier: Apache-2.0
"""Query quantization (spec §2.3, §2.4) with optional fused RoPE (spec §2.2).

RoPE rotates 64 dims of each 128- (or 64-) wide vector, the first 64 (DeepSeek-V3.2, GLM-5) or
the last 64 (V4, V4.1), in NeoX halves (i, i + 32) or GPT-J interleaved pairs (2i, 2i + 1), from
``cos_sin_cache[pos]`` = [cos_0..cos_31 | sin_0..sin_31]; the rotation is computed in fp32 and
rounded to bf16 before quantizing. The style is always given by the caller: engines disagree on
the default. The same ``Rope`` is accepted by ``insert_k_cache`` for the key.
"""

from typing import Any, NamedTuple

from . import _C
from ._tensors import empty, raw, shape, stream_handle


class Rope(NamedTuple):
    """RoPE before quantization.

    style: "neox" or "interleaved"; dims: "first64" or "last64";
    cos_sin_cache: [P, 64] float32 or bfloat16; positions: [N] int64 or int32 (one per token
    or key), on the device of the data. On CUDA tensors positions outside [0, P) cannot be
    checked without a synchronisation: such a row is quantized unrotated (an error on CPU).
    """

    style: str
    dims: str
    cos_sin_cache: Any
    positions: Any


def _rope_args(rope):
    if rope is None:
        return {"rope_style": "none", "rope_dims": "", "cos_sin_cache": None, "positions": None}
    if not isinstance(rope, Rope):
        raise TypeError(f"rope is a {type(rope).__name__}, expected flashindexer.Rope or None")
    return {"rope_style": rope.style, "rope_dims": rope.dims,
            "cos_sin_cache": raw(rope.cos_sin_cache), "positions": raw(rope.positions)}


def quantize_query_fp8(q, weights, *, eps, weight_scale=0.0, rope=None, out=None, stream=None,
                       cpu_threads=0):
    """FP8 query quantization per (token, head), the scale folded into the weights:

        sigma = 2^ceil(log2(max(amax_d |q[t, h, d]|, eps) / 448))
        values[t, h, :] = e4m3(q[t, h, :] / sigma)
        weights_out[t, h] = (weights[t, h] * sigma) * weight_scale

    q: [T, H, D] float32 or bfloat16 (D 64 or 128); weights: [T, H] float32 or bfloat16.
    eps: 1e-10 (DeepSeek-V3.2) or 1e-4 (V4); no default. weight_scale: 0 = D^-1/2 * H^-1/2.
    rope: optional ``Rope``. out: optional (values, weights_out); weights_out may be ``weights``
    itself (float32) to fold in place.
    Returns (values [T, H, D] e4m3, weights_out [T, H] float32).
    """
    dims = shape(q, "quantize_query_fp8: q")
    values, weights_out = out if out is not None else (
        empty(q, dims, "e4m3"), empty(q, dims[:2], "f32"))
    _C.quantize_query_fp8(raw(values), raw(weights_out), raw(q), raw(weights), eps=eps,
                          weight_scale=weight_scale, stream=stream_handle(stream, [q]),
                          cpu_threads=cpu_threads, **_rope_args(rope))
    return values, weights_out


def quantize_query_mxfp4(q, weights, *, weight_scale=0.0, rope=None, out=None, stream=None,
                         cpu_threads=0):
    """MXFP4 query quantization: each head as ``quantize_mxfp4`` (blocks of 32, UE8M0 scales);
    the weights are not q-scaled: weights_out = weights * weight_scale.

    q, weights, weight_scale, rope as ``quantize_query_fp8``. out: optional
    (values, scales, weights_out). Returns ((values [T, H, D/2] uint8, scales [T, H, D/32]
    uint8), weights_out [T, H] float32).
    """
    from .ops import QuantizedTensor

    dims = shape(q, "quantize_query_mxfp4: q")
    values, scales, weights_out = out if out is not None else (
        empty(q, dims[:2] + (dims[2] // 2,), "u8"), empty(q, dims[:2] + (dims[2] // 32,), "u8"),
        empty(q, dims[:2], "f32"))
    _C.quantize_query_mxfp4(raw(values), raw(scales), raw(weights_out), raw(q), raw(weights),
                            weight_scale=weight_scale, stream=stream_handle(stream, [q]),
                            cpu_threads=cpu_threads, **_rope_args(rope))
    return QuantizedTensor(values, scales), weights_out


def default_query_weight_scale(head_dim, heads):
    """The weight_scale that 0 stands for: float32(1 / sqrt(head_dim * heads))."""
    return _C.default_query_weight_scale(head_dim, heads)
