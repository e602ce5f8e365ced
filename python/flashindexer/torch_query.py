# SPDX-License-Identifier: Apache-2.0
"""The query quantizers and the cache writer with fused RoPE as PyTorch custom ops; imported by
``flashindexer.torch``, which re-exports the wrappers below.

torch.ops.flashindexer.quantize_query_fp8(q, weights, eps, weight_scale, rope_style, rope_dims,
    cos_sin_cache, positions) -> (values [T, H, D] float8_e4m3fn, weights_out [T, H] float32)
torch.ops.flashindexer.quantize_query_mxfp4(q, weights, weight_scale, rope_style, rope_dims,
    cos_sin_cache, positions) -> (values [T, H, D/2] uint8, scales [T, H, D/32] uint8,
    weights_out [T, H] float32)
torch.ops.flashindexer.insert_k_cache_rope(cache!, keys, slot_mapping, page_size, head_dim,
    format, rope_style, rope_dims, cos_sin_cache, positions) -> None (the cache is mutated)
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import query as _query
from . import ops as _ops
from .cache import PagedKCache


def _rope(style, dims, cos_sin_cache, positions):
    return None if style == "none" else _query.Rope(style, dims, cos_sin_cache, positions)


@torch.library.custom_op("flashindexer::quantize_query_fp8", mutates_args=())
def _quantize_query_fp8(q: Tensor, weights: Tensor, eps: float, weight_scale: float,
                        rope_style: str, rope_dims: str, cos_sin_cache: Optional[Tensor],
                        positions: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    return _query.quantize_query_fp8(
        q, weights, eps=eps, weight_scale=weight_scale,
        rope=_rope(rope_style, rope_dims, cos_sin_cache, positions))


@_quantize_query_fp8.register_fake
def _(q, weights, eps, weight_scale, rope_style, rope_dims, cos_sin_cache, positions):
    return (q.new_empty(q.shape, dtype=torch.float8_e4m3fn),
            q.new_empty(q.shape[:2], dtype=torch.float32))


@torch.library.custom_op("flashindexer::quantize_query_mxfp4", mutates_args=())
def _quantize_query_mxfp4(q: Tensor, weights: Tensor, weight_scale: float, rope_style: str,
                          rope_dims: str, cos_sin_cache: Optional[Tensor],
                          positions: Optional[Tensor]) -> Tuple[Tensor, Tensor, Tensor]:
    (values, scales), weights_out = _query.quantize_query_mxfp4(
        q, weights, weight_scale=weight_scale,
        rope=_rope(rope_style, rope_dims, cos_sin_cache, positions))
    return values, scales, weights_out


@_quantize_query_mxfp4.register_fake
def _(q, weights, weight_scale, rope_style, rope_dims, cos_sin_cache, positions):
    t, h, d = q.shape
    return (q.new_empty((t, h, d // 2), dtype=torch.uint8),
            q.new_empty((t, h, d // 32), dtype=torch.uint8),
            q.new_empty((t, h), dtype=torch.float32))


@torch.library.custom_op("flashindexer::insert_k_cache_rope", mutates_args=("cache",))
def _insert_k_cache_rope(cache: Tensor, keys: Tensor, slot_mapping: Tensor, page_size: int,
                         head_dim: int, format: str, rope_style: str, rope_dims: str,
                         cos_sin_cache: Tensor, positions: Tensor) -> None:
    _ops.insert_k_cache(PagedKCache(cache, page_size, head_dim, format), keys, slot_mapping,
                        rope=_query.Rope(rope_style, rope_dims, cos_sin_cache, positions))


@_insert_k_cache_rope.register_fake
def _(cache, keys, slot_mapping, page_size, head_dim, format, rope_style, rope_dims,
      cos_sin_cache, positions):
    return None


def _rope_fields(rope):
    if rope is None:
        return "none", "", None, None
    return rope.style, rope.dims, rope.cos_sin_cache, rope.positions


def quantize_query_fp8(q, weights, eps, weight_scale=0.0, rope=None):
    """(values, weights_out) of flashindexer.quantize_query_fp8, as a custom op."""
    return torch.ops.flashindexer.quantize_query_fp8(q, weights, eps, weight_scale,
                                                     *_rope_fields(rope))


def quantize_query_mxfp4(q, weights, weight_scale=0.0, rope=None):
    """(QuantizedTensor(values, scales), weights_out) of flashindexer.quantize_query_mxfp4."""
    values, scales, weights_out = torch.ops.flashindexer.quantize_query_mxfp4(
        q, weights, weight_scale, *_rope_fields(rope))
    return _ops.QuantizedTensor(values, scales), weights_out


def insert_k_cache_rope(cache: PagedKCache, keys, slot_mapping, rope):
    """flashindexer.insert_k_cache(..., rope=rope) as a custom op."""
    torch.ops.flashindexer.insert_k_cache_rope(cache.data, keys, slot_mapping, cache.page_size,
                                               cache.head_dim, cache.format, *_rope_fields(rope))
