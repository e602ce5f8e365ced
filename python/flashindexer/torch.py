# SPDX-License-Identifier: Apache-2.0
"""FlashIndexer ops as PyTorch custom ops (torch.library), for torch.compile and CUDA graphs.

Importing this module registers ``torch.ops.flashindexer.*``:

====================================  ==========================================================
op                                    returns
====================================  ==========================================================
quantize_k_fp8(input)                 (values [N, D] float8_e4m3fn, scales [N] float32)
dequantize_k_fp8(values, scales)      [N, D] float32
quantize_mxfp4(input)                 (values [..., D/2] uint8, scales [..., D/32] uint8)
dequantize_mxfp4(values, scales)      [..., D] float32
insert_k_cache(cache!, ...)           None; writes the cache pages (declared mutated)
gather_k_workspace(cache, ...)        (values, scales) of the packed prefill workspace
mqa_logits(...)                       [M, N] float32
paged_mqa_logits(...)                 [B * next_n, width] float32
topk_per_row(logits, k, ...)          [rows, k] int32
topk_per_row_out(out!, logits, ...)   None; writes out (declared mutated)
indexer_prefill(...)                  [M, k] int32
indexer_decode(...)                   [B * next_n, k] int32
quantize_query_fp8(q, weights, ...)   (values [T, H, D] float8_e4m3fn, weights_out [T, H] f32)
quantize_query_mxfp4(q, weights, ...) (values, scales, weights_out) of the MXFP4 query form
insert_k_cache_rope(cache!, ...)      None; insert_k_cache with the key's RoPE fused in
select_candidate_blocks(logits, ...)  [rows, C] int32 (V4.1 candidate source)
apply_candidate_mask(logits!, ...)    None; masks logits in place (declared mutated)
candidate_topk_per_row(logits, ...)   [rows, k] int32 (V4.1 consumer, exact)
candidate_blocks_to_sparse_indices    (sparse_indices [rows, S] int32, end [rows] int32)
sparse_topk_remap(columns, ...)       [rows, k] int32
sparse_mqa_logits(...)                [rows, S * SBK] float32 (V4.1 sparse consumer's logits)
paged_sparse_mqa_logits(...)          [B * next_n, S * SBK] float32
indexer_prefill_candidates(...)       [M, k] int32 (indexer_prefill of a consumer layer)
indexer_decode_candidates(...)        [B * next_n, k] int32
build_sparse_consumer_rows_prefill    [bytes] uint8: a consumer step's sparse rows (_decode too)
indexer_prefill_outputs(...)          (topk, scores, blocks): with scores / candidate output
indexer_decode_outputs(...)           (topk, scores, blocks) (torch_outputs.py)
====================================  ==========================================================

Every op has a fake (meta) implementation giving the output shapes, so it traces under
torch.compile, and runs on PyTorch's current CUDA stream with workspace from PyTorch's caching
allocator (the indexer's, kept per device, stream and k after its first call), so it can be
captured in a CUDA graph (every op above has a CUDA backend).
Quantized operands are passed as separate values / scales tensors (scales None for FP8
queries); the paged cache as its uint8 page tensor plus page_size, head_dim and format.
The Python functions of the same names below wrap the ops with the argument forms of
``flashindexer`` (QuantizedTensor pairs, PagedKCache).
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import candidates as _candidates
from . import ops as _ops
from . import torch_outputs as _outputs
from .cache import PagedKCache

_FP8 = torch.float8_e4m3fn


def _cache(data, page_size, head_dim, format):
    return PagedKCache(data, page_size, head_dim, format)


def _q(values, scales):
    return values if scales is None else (values, scales)


# ----------------------------------------------------------------------------------------------
# Quantization


@torch.library.custom_op("flashindexer::quantize_k_fp8", mutates_args=())
def _quantize_k_fp8(input: Tensor) -> Tuple[Tensor, Tensor]:
    values, scales = _ops.quantize_k_fp8(input)
    return values, scales


@_quantize_k_fp8.register_fake
def _(input):
    return (input.new_empty(input.shape, dtype=_FP8),
            input.new_empty(input.shape[:1], dtype=torch.float32))


@torch.library.custom_op("flashindexer::dequantize_k_fp8", mutates_args=())
def _dequantize_k_fp8(values: Tensor, scales: Tensor) -> Tensor:
    return _ops.dequantize_k_fp8(values, scales)


@_dequantize_k_fp8.register_fake
def _(values, scales):
    return values.new_empty(values.shape, dtype=torch.float32)


@torch.library.custom_op("flashindexer::quantize_mxfp4", mutates_args=())
def _quantize_mxfp4(input: Tensor) -> Tuple[Tensor, Tensor]:
    values, scales = _ops.quantize_mxfp4(input)
    return values, scales


@_quantize_mxfp4.register_fake
def _(input):
    lead, d = tuple(input.shape[:-1]), input.shape[-1]
    return (input.new_empty(lead + (d // 2,), dtype=torch.uint8),
            input.new_empty(lead + (d // 32,), dtype=torch.uint8))


@torch.library.custom_op("flashindexer::dequantize_mxfp4", mutates_args=())
def _dequantize_mxfp4(values: Tensor, scales: Tensor) -> Tensor:
    return _ops.dequantize_mxfp4(values, scales)


@_dequantize_mxfp4.register_fake
def _(values, scales):
    return values.new_empty(tuple(values.shape[:-1]) + (values.shape[-1] * 2,), dtype=torch.float32)


# ----------------------------------------------------------------------------------------------
# The paged K cache


@torch.library.custom_op("flashindexer::insert_k_cache", mutates_args=("cache",))
def _insert_k_cache(cache: Tensor, keys: Tensor, slot_mapping: Tensor, page_size: int,
                    head_dim: int, format: str) -> None:
    _ops.insert_k_cache(_cache(cache, page_size, head_dim, format), keys, slot_mapping)


@_insert_k_cache.register_fake
def _(cache, keys, slot_mapping, page_size, head_dim, format):
    return None


@torch.library.custom_op("flashindexer::gather_k_workspace", mutates_args=())
def _gather_k_workspace(cache: Tensor, page_size: int, head_dim: int, format: str,
                        block_table: Tensor, cu_seq_lens: Tensor,
                        num_keys: int) -> Tuple[Tensor, Tensor]:
    values, scales = _ops.gather_k_workspace(_cache(cache, page_size, head_dim, format),
                                             block_table, cu_seq_lens, num_keys=num_keys)
    return values, scales


@_gather_k_workspace.register_fake
def _(cache, page_size, head_dim, format, block_table, cu_seq_lens, num_keys):
    if format == "mxfp4":
        return (cache.new_empty((num_keys, head_dim // 2), dtype=torch.uint8),
                cache.new_empty((num_keys, head_dim // 32), dtype=torch.uint8))
    return (cache.new_empty((num_keys, head_dim), dtype=_FP8),
            cache.new_empty((num_keys,), dtype=torch.float32))


# ----------------------------------------------------------------------------------------------
# Scoring


@torch.library.custom_op("flashindexer::mqa_logits", mutates_args=())
def _mqa_logits(q_values: Tensor, q_scales: Optional[Tensor], k_values: Tensor, k_scales: Tensor,
                weights: Tensor, ks: Tensor, ke: Tensor, clean: bool = True) -> Tensor:
    workspace = None
    if q_scales is not None and q_values.is_cuda:
        # MXFP4: the operands converted once, then the FP8 kernel (the same bits, faster).
        size = _ops.mqa_logits_cuda_workspace_size(q_values.shape[0], q_values.shape[1],
                                                   k_values.shape[0])
        workspace = torch.empty(size, dtype=torch.uint8, device=q_values.device)
    return _ops.mqa_logits(_q(q_values, q_scales), (k_values, k_scales), weights, ks, ke,
                           clean=clean, workspace=workspace)


@_mqa_logits.register_fake
def _(q_values, q_scales, k_values, k_scales, weights, ks, ke, clean=True):
    return weights.new_empty((weights.shape[0], k_values.shape[0]), dtype=torch.float32)


@torch.library.custom_op("flashindexer::paged_mqa_logits", mutates_args=())
def _paged_mqa_logits(q_values: Tensor, q_scales: Optional[Tensor], cache: Tensor, page_size: int,
                      head_dim: int, format: str, weights: Tensor, context_lens: Tensor,
                      block_table: Tensor, width: int, clean: bool = True) -> Tensor:
    return _ops.paged_mqa_logits(_q(q_values, q_scales), _cache(cache, page_size, head_dim, format),
                                 weights, context_lens, block_table, width=width, clean=clean)


@_paged_mqa_logits.register_fake
def _(q_values, q_scales, cache, page_size, head_dim, format, weights, context_lens, block_table,
      width, clean=True):
    return weights.new_empty((weights.shape[0], width), dtype=torch.float32)


# ----------------------------------------------------------------------------------------------
# Selection


@torch.library.custom_op("flashindexer::topk_per_row", mutates_args=())
def _topk_per_row(logits: Tensor, k: int, ks: Optional[Tensor] = None, ke: Optional[Tensor] = None,
                  lengths: Optional[Tensor] = None, next_n: int = 1,
                  sorted: bool = False) -> Tensor:
    return _ops.topk_per_row(logits, k, ks=ks, ke=ke, lengths=lengths, next_n=next_n,
                             sorted=sorted)


@_topk_per_row.register_fake
def _(logits, k, ks=None, ke=None, lengths=None, next_n=1, sorted=False):
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


@torch.library.custom_op("flashindexer::topk_per_row_out", mutates_args=("out",))
def _topk_per_row_out(out: Tensor, logits: Tensor, k: int, ks: Optional[Tensor] = None,
                      ke: Optional[Tensor] = None, lengths: Optional[Tensor] = None,
                      next_n: int = 1, sorted: bool = False) -> None:
    _ops.topk_per_row(logits, k, ks=ks, ke=ke, lengths=lengths, next_n=next_n, sorted=sorted,
                      out=out)


@_topk_per_row_out.register_fake
def _(out, logits, k, ks=None, ke=None, lengths=None, next_n=1, sorted=False):
    return None


# ----------------------------------------------------------------------------------------------
# Scoring + selection


@torch.library.custom_op("flashindexer::indexer_prefill", mutates_args=())
def _indexer_prefill(q_values: Tensor, q_scales: Optional[Tensor], k_values: Tensor,
                     k_scales: Tensor, weights: Tensor, ks: Tensor, ke: Tensor, k: int,
                     sorted: bool = False, min_row_keys: int = 0) -> Tensor:
    return _ops.indexer_prefill(_q(q_values, q_scales), (k_values, k_scales), weights, ks, ke, k,
                                sorted=sorted, min_row_keys=min_row_keys)


@_indexer_prefill.register_fake
def _(q_values, q_scales, k_values, k_scales, weights, ks, ke, k, sorted=False, min_row_keys=0):
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32)


@torch.library.custom_op("flashindexer::indexer_decode", mutates_args=())
def _indexer_decode(q_values: Tensor, q_scales: Optional[Tensor], cache: Tensor, page_size: int,
                    head_dim: int, format: str, weights: Tensor, context_lens: Tensor,
                    block_table: Tensor, k: int, sorted: bool = False) -> Tensor:
    return _ops.indexer_decode(_q(q_values, q_scales), _cache(cache, page_size, head_dim, format),
                               weights, context_lens, block_table, k, sorted=sorted)


@_indexer_decode.register_fake
def _(q_values, q_scales, cache, page_size, head_dim, format, weights, context_lens, block_table,
      k, sorted=False):
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32)


# ----------------------------------------------------------------------------------------------
# Python-level wrappers with the argument forms of flashindexer


def _split(operand):
    if isinstance(operand, (tuple, list)):
        return operand[0], operand[1]
    return operand, None


def quantize_k_fp8(input):
    return _ops.QuantizedTensor(*torch.ops.flashindexer.quantize_k_fp8(input))


def dequantize_k_fp8(values, scales):
    return torch.ops.flashindexer.dequantize_k_fp8(values, scales)


def quantize_mxfp4(input):
    return _ops.QuantizedTensor(*torch.ops.flashindexer.quantize_mxfp4(input))


def dequantize_mxfp4(values, scales):
    return torch.ops.flashindexer.dequantize_mxfp4(values, scales)


def insert_k_cache(cache: PagedKCache, keys, slot_mapping):
    torch.ops.flashindexer.insert_k_cache(cache.data, keys, slot_mapping, cache.page_size,
                                          cache.head_dim, cache.format)


def gather_k_workspace(cache: PagedKCache, block_table, cu_seq_lens, num_keys):
    return _ops.QuantizedTensor(*torch.ops.flashindexer.gather_k_workspace(
        cache.data, cache.page_size, cache.head_dim, cache.format, block_table, cu_seq_lens,
        num_keys))


def mqa_logits(q, keys, weights, ks, ke, clean=True):
    q_values, q_scales = _split(q)
    return torch.ops.flashindexer.mqa_logits(q_values, q_scales, keys[0], keys[1], weights, ks,
                                             ke, clean)


def paged_mqa_logits(q, cache: PagedKCache, weights, context_lens, block_table, width=None,
                     clean=True):
    q_values, q_scales = _split(q)
    if width is None:
        width = block_table.shape[1] * cache.page_size
    return torch.ops.flashindexer.paged_mqa_logits(
        q_values, q_scales, cache.data, cache.page_size, cache.head_dim, cache.format, weights,
        context_lens, block_table, width, clean)


def topk_per_row(logits, k, ks=None, ke=None, lengths=None, next_n=1, sorted=False, out=None):
    if out is not None:
        torch.ops.flashindexer.topk_per_row_out(out, logits, k, ks, ke, lengths, next_n, sorted)
        return out
    return torch.ops.flashindexer.topk_per_row(logits, k, ks, ke, lengths, next_n, sorted)


def _refuse_outputs_with_vllm(op, vllm_compatible):
    # Raised before the op is called, so that a traced call fails as an eager one does.
    if vllm_compatible:
        raise NotImplementedError(f"{op}: scores / candidate_source with vllm_compatible "
                                  "candidates are not supported")


def indexer_prefill(q, keys, weights, ks, ke, k, sorted=False, min_row_keys=0, candidates=None,
                    candidate_block_size=0, vllm_compatible=False, scores=False,
                    candidate_source=0, candidate_source_block_size=0, candidate_rows=None):
    """indexer_prefill as a custom op. scores=True and / or candidate_source=C (an int) return
    IndexerOutputs(topk, scores, candidate_blocks) as flashindexer.indexer_prefill does.
    candidate_rows: a consumer step's sparse rows (build_sparse_consumer_rows_prefill)."""
    q_values, q_scales = _split(q)
    if scores or candidate_source:
        _refuse_outputs_with_vllm("indexer_prefill", vllm_compatible)
        return _outputs.indexer_prefill_outputs(
            q_values, q_scales, keys, weights, ks, ke, k, sorted=sorted,
            min_row_keys=min_row_keys, candidates=candidates,
            candidate_block_size=candidate_block_size, scores=scores,
            candidate_source=candidate_source,
            candidate_source_block_size=candidate_source_block_size)
    if candidates is not None:
        return torch.ops.flashindexer.indexer_prefill_candidates(
            q_values, q_scales, keys[0], keys[1], weights, ks, ke, k, candidates,
            candidate_block_size, vllm_compatible, sorted, candidate_rows)
    return torch.ops.flashindexer.indexer_prefill(q_values, q_scales, keys[0], keys[1], weights,
                                                  ks, ke, k, sorted, min_row_keys)


def indexer_decode(q, cache: PagedKCache, weights, context_lens, block_table, k, sorted=False,
                   candidates=None, candidate_block_size=0, vllm_compatible=False, scores=False,
                   candidate_source=0, candidate_source_block_size=0, candidate_rows=None):
    """indexer_decode as a custom op; scores / candidate_source / candidate_rows as
    indexer_prefill (candidate_rows from build_sparse_consumer_rows_decode)."""
    q_values, q_scales = _split(q)
    if scores or candidate_source:
        _refuse_outputs_with_vllm("indexer_decode", vllm_compatible)
        return _outputs.indexer_decode_outputs(
            q_values, q_scales, cache, weights, context_lens, block_table, k, sorted=sorted,
            candidates=candidates, candidate_block_size=candidate_block_size, scores=scores,
            candidate_source=candidate_source,
            candidate_source_block_size=candidate_source_block_size)
    if candidates is not None:
        return torch.ops.flashindexer.indexer_decode_candidates(
            q_values, q_scales, cache.data, cache.page_size, cache.head_dim, cache.format,
            weights, context_lens, block_table, k, candidates, candidate_block_size,
            vllm_compatible, sorted, candidate_rows)
    return torch.ops.flashindexer.indexer_decode(
        q_values, q_scales, cache.data, cache.page_size, cache.head_dim, cache.format, weights,
        context_lens, block_table, k, sorted)


# The query quantizers and insert_k_cache with RoPE (torch_query.py).
from .torch_query import insert_k_cache_rope, quantize_query_fp8, quantize_query_mxfp4  # noqa: E402,F401
# A consumer step's sparse rows (torch_step_rows.py).
from .torch_step_rows import (  # noqa: E402,F401
    build_sparse_consumer_rows_decode, build_sparse_consumer_rows_prefill)


# ----------------------------------------------------------------------------------------------
# DeepSeek-V4.1 candidate blocks (flashindexer.candidates); row bounds as ke, optional ks and
# row_repeat. Their CUDA workspace comes from PyTorch's caching allocator on each call.


@torch.library.custom_op("flashindexer::select_candidate_blocks", mutates_args=())
def _select_candidate_blocks(logits: Tensor, num_blocks: int, block_size: int, ke: Tensor,
                             ks: Optional[Tensor] = None, row_repeat: int = 1) -> Tensor:
    return _candidates.select_candidate_blocks(logits, num_blocks, block_size, ke=ke, ks=ks,
                                               row_repeat=row_repeat)


@_select_candidate_blocks.register_fake
def _(logits, num_blocks, block_size, ke, ks=None, row_repeat=1):
    return logits.new_empty((logits.shape[0], num_blocks), dtype=torch.int32)


@torch.library.custom_op("flashindexer::apply_candidate_mask", mutates_args=("logits",))
def _apply_candidate_mask(logits: Tensor, candidates: Tensor, block_size: int, ke: Tensor,
                          ks: Optional[Tensor] = None, row_repeat: int = 1) -> None:
    _candidates.apply_candidate_mask(logits, candidates, block_size, ke=ke, ks=ks,
                                     row_repeat=row_repeat)


@_apply_candidate_mask.register_fake
def _(logits, candidates, block_size, ke, ks=None, row_repeat=1):
    return None


@torch.library.custom_op("flashindexer::candidate_topk_per_row", mutates_args=())
def _candidate_topk_per_row(logits: Tensor, candidates: Tensor, block_size: int, k: int,
                            ke: Tensor, ks: Optional[Tensor] = None, row_repeat: int = 1,
                            sorted: bool = False) -> Tensor:
    return _candidates.candidate_topk_per_row(logits, candidates, block_size, k, ke=ke, ks=ks,
                                              row_repeat=row_repeat, sorted=sorted)


@_candidate_topk_per_row.register_fake
def _(logits, candidates, block_size, k, ke, ks=None, row_repeat=1, sorted=False):
    return logits.new_empty((logits.shape[0], k), dtype=torch.int32)


@torch.library.custom_op("flashindexer::candidate_blocks_to_sparse_indices", mutates_args=())
def _candidate_blocks_to_sparse_indices(candidates: Tensor, block_size: int, sparse_block: int,
                                        ke: Tensor, ks: Optional[Tensor] = None,
                                        row_repeat: int = 1) -> Tuple[Tensor, Tensor]:
    return _candidates.candidate_blocks_to_sparse_indices(candidates, block_size, sparse_block,
                                                          ke=ke, ks=ks, row_repeat=row_repeat)


@_candidate_blocks_to_sparse_indices.register_fake
def _(candidates, block_size, sparse_block, ke, ks=None, row_repeat=1):
    rows, count = candidates.shape[0], candidates.shape[1]
    return (candidates.new_empty((rows, count * (block_size // sparse_block)), dtype=torch.int32),
            candidates.new_empty((rows,), dtype=torch.int32))


@torch.library.custom_op("flashindexer::sparse_topk_remap", mutates_args=())
def _sparse_topk_remap(columns: Tensor, sparse_indices: Tensor, sparse_block: int,
                       ks: Optional[Tensor] = None, row_repeat: int = 1) -> Tensor:
    return _candidates.sparse_topk_remap(columns, sparse_indices, sparse_block, ks=ks,
                                         row_repeat=row_repeat)


@_sparse_topk_remap.register_fake
def _(columns, sparse_indices, sparse_block, ks=None, row_repeat=1):
    return torch.empty_like(columns, dtype=torch.int32)


@torch.library.custom_op("flashindexer::sparse_mqa_logits", mutates_args=())
def _sparse_mqa_logits(q_values: Tensor, q_scales: Optional[Tensor], k_values: Tensor,
                       k_scales: Tensor, weights: Tensor, sparse_indices: Tensor, end: Tensor,
                       sparse_block: int, ks: Tensor, ke: Tensor, clean: bool = True) -> Tensor:
    return _candidates.sparse_mqa_logits(_q(q_values, q_scales), (k_values, k_scales), weights,
                                         sparse_indices, end, sparse_block, ks=ks, ke=ke,
                                         clean=clean)


@_sparse_mqa_logits.register_fake
def _(q_values, q_scales, k_values, k_scales, weights, sparse_indices, end, sparse_block, ks, ke,
      clean=True):
    return weights.new_empty((sparse_indices.shape[0], sparse_indices.shape[1] * sparse_block),
                             dtype=torch.float32)


@torch.library.custom_op("flashindexer::paged_sparse_mqa_logits", mutates_args=())
def _paged_sparse_mqa_logits(q_values: Tensor, q_scales: Optional[Tensor], cache: Tensor,
                             page_size: int, head_dim: int, format: str, weights: Tensor,
                             sparse_indices: Tensor, end: Tensor, block_table: Tensor,
                             sparse_block: int, clean: bool = True) -> Tensor:
    return _candidates.paged_sparse_mqa_logits(
        _q(q_values, q_scales), _cache(cache, page_size, head_dim, format), weights,
        sparse_indices, end, block_table, sparse_block, clean=clean)


@_paged_sparse_mqa_logits.register_fake
def _(q_values, q_scales, cache, page_size, head_dim, format, weights, sparse_indices, end,
      block_table, sparse_block, clean=True):
    return weights.new_empty((sparse_indices.shape[0], sparse_indices.shape[1] * sparse_block),
                             dtype=torch.float32)


@torch.library.custom_op("flashindexer::indexer_prefill_candidates", mutates_args=())
def _indexer_prefill_candidates(q_values: Tensor, q_scales: Optional[Tensor], k_values: Tensor,
                                k_scales: Tensor, weights: Tensor, ks: Tensor, ke: Tensor, k: int,
                                candidates: Tensor, candidate_block_size: int,
                                vllm_compatible: bool = False, sorted: bool = False,
                                candidate_rows: Optional[Tensor] = None) -> Tensor:
    return _ops.indexer_prefill(_q(q_values, q_scales), (k_values, k_scales), weights, ks, ke, k,
                                sorted=sorted, candidates=candidates,
                                candidate_block_size=candidate_block_size,
                                vllm_compatible=vllm_compatible, candidate_rows=candidate_rows)


@_indexer_prefill_candidates.register_fake
def _(q_values, q_scales, k_values, k_scales, weights, ks, ke, k, candidates,
      candidate_block_size, vllm_compatible=False, sorted=False, candidate_rows=None):
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32)


@torch.library.custom_op("flashindexer::indexer_decode_candidates", mutates_args=())
def _indexer_decode_candidates(q_values: Tensor, q_scales: Optional[Tensor], cache: Tensor,
                               page_size: int, head_dim: int, format: str, weights: Tensor,
                               context_lens: Tensor, block_table: Tensor, k: int,
                               candidates: Tensor, candidate_block_size: int,
                               vllm_compatible: bool = False, sorted: bool = False,
                               candidate_rows: Optional[Tensor] = None) -> Tensor:
    return _ops.indexer_decode(_q(q_values, q_scales), _cache(cache, page_size, head_dim, format),
                               weights, context_lens, block_table, k, sorted=sorted,
                               candidates=candidates, candidate_block_size=candidate_block_size,
                               vllm_compatible=vllm_compatible, candidate_rows=candidate_rows)


@_indexer_decode_candidates.register_fake
def _(q_values, q_scales, cache, page_size, head_dim, format, weights, context_lens, block_table,
      k, candidates, candidate_block_size, vllm_compatible=False, sorted=False,
      candidate_rows=None):
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32)


def select_candidate_blocks(logits, num_blocks, block_size, ke, ks=None, row_repeat=1):
    return torch.ops.flashindexer.select_candidate_blocks(logits, num_blocks, block_size, ke, ks,
                                                          row_repeat)


def apply_candidate_mask(logits, candidates, block_size, ke, ks=None, row_repeat=1):
    torch.ops.flashindexer.apply_candidate_mask(logits, candidates, block_size, ke, ks, row_repeat)
    return logits


def candidate_topk_per_row(logits, candidates, block_size, k, ke, ks=None, row_repeat=1,
                           sorted=False, vllm_compatible=False):
    """The exact consumer, or with vllm_compatible vLLM's mask (in place) then the top-k over the
    rows' visible columns [ks, min(ke, width))."""
    if not vllm_compatible:
        return torch.ops.flashindexer.candidate_topk_per_row(logits, candidates, block_size, k, ke,
                                                             ks, row_repeat, sorted)
    apply_candidate_mask(logits, candidates, block_size, ke, ks, row_repeat)
    width = logits.shape[1]
    ke_rows = ke.reshape(-1).repeat_interleave(row_repeat).clamp(max=width)
    ks_rows = (torch.zeros_like(ke_rows) if ks is None
               else ks.repeat_interleave(row_repeat).clamp(max=width))
    return topk_per_row(logits, k, ks=ks_rows, ke=torch.maximum(ke_rows, ks_rows), sorted=sorted)


def candidate_blocks_to_sparse_indices(candidates, block_size, sparse_block, ke, ks=None,
                                       row_repeat=1):
    return torch.ops.flashindexer.candidate_blocks_to_sparse_indices(
        candidates, block_size, sparse_block, ke, ks, row_repeat)


def sparse_topk_remap(columns, sparse_indices, sparse_block, ks=None, row_repeat=1):
    return torch.ops.flashindexer.sparse_topk_remap(columns, sparse_indices, sparse_block, ks,
                                                    row_repeat)


def sparse_mqa_logits(q, keys, weights, sparse_indices, end, sparse_block, ks, ke, clean=True):
    q_values, q_scales = _ops._quantized("q", q)
    k_values, k_scales = _ops._quantized("keys", keys)
    return torch.ops.flashindexer.sparse_mqa_logits(q_values, q_scales, k_values, k_scales,
                                                    weights, sparse_indices, end, sparse_block,
                                                    ks, ke, clean)


def paged_sparse_mqa_logits(q, cache: PagedKCache, weights, sparse_indices, end, block_table,
                            sparse_block, clean=True):
    q_values, q_scales = _ops._quantized("q", q)
    return torch.ops.flashindexer.paged_sparse_mqa_logits(
        q_values, q_scales, cache.data, cache.page_size, cache.head_dim, cache.format, weights,
        sparse_indices, end, block_table, sparse_block, clean)
