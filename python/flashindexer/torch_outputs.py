# SPDX-License-Identifier: Apache-2.0
"""The indexer calls with their optional outputs as PyTorch custom ops; imported by
``flashindexer.torch``, whose ``indexer_prefill`` / ``indexer_decode`` route here when
``scores`` or ``candidate_source`` is asked for.

torch.ops.flashindexer.indexer_prefill_outputs(q_values, q_scales, k_values, k_scales, weights,
    ks, ke, k, with_scores, num_blocks, block_size, candidates, candidate_block_size, sorted,
    min_row_keys, path) -> (topk [M, k] int32, scores [M, k] float32, blocks [M, C] int32)
torch.ops.flashindexer.indexer_decode_outputs(q_values, q_scales, cache, page_size, head_dim,
    format, weights, context_lens, block_table, k, with_scores, num_blocks, block_size,
    candidates, candidate_block_size, sorted, path) -> (topk, scores, blocks)

An output not asked for comes back with 0 columns (scores [M, 0] when with_scores is False,
blocks [M, 0] when num_blocks is 0): an op's outputs are fixed tensors.
"""

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import ops as _ops
from .cache import PagedKCache


def _q(values, scales):
    return values if scales is None else (values, scales)


def _outputs(weights, k, with_scores, num_blocks):
    rows = weights.shape[0]
    scores = weights.new_empty((rows, k if with_scores else 0), dtype=torch.float32)
    blocks = weights.new_empty((rows, num_blocks), dtype=torch.int32)
    return scores, blocks


def _asked(with_scores, num_blocks, scores, blocks):
    return (scores if with_scores else None), (blocks if num_blocks > 0 else None)


@torch.library.custom_op("flashindexer::indexer_prefill_outputs", mutates_args=())
def _indexer_prefill_outputs(q_values: Tensor, q_scales: Optional[Tensor], k_values: Tensor,
                             k_scales: Tensor, weights: Tensor, ks: Tensor, ke: Tensor, k: int,
                             with_scores: bool, num_blocks: int, block_size: int,
                             candidates: Optional[Tensor] = None, candidate_block_size: int = 0,
                             sorted: bool = False, min_row_keys: int = 0,
                             path: str = "auto") -> Tuple[Tensor, Tensor, Tensor]:
    scores, blocks = _outputs(weights, k, with_scores, num_blocks)
    asked_scores, asked_blocks = _asked(with_scores, num_blocks, scores, blocks)
    result = _ops.indexer_prefill(
        _q(q_values, q_scales), (k_values, k_scales), weights, ks, ke, k, sorted=sorted,
        min_row_keys=min_row_keys, path=path, candidates=candidates,
        candidate_block_size=candidate_block_size, scores=asked_scores,
        candidate_source=asked_blocks, candidate_source_block_size=block_size)
    topk = result.topk if isinstance(result, _ops.IndexerOutputs) else result
    return topk, scores, blocks


@_indexer_prefill_outputs.register_fake
def _(q_values, q_scales, k_values, k_scales, weights, ks, ke, k, with_scores, num_blocks,
      block_size, candidates=None, candidate_block_size=0, sorted=False, min_row_keys=0,
      path="auto"):
    scores, blocks = _outputs(weights, k, with_scores, num_blocks)
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32), scores, blocks


@torch.library.custom_op("flashindexer::indexer_decode_outputs", mutates_args=())
def _indexer_decode_outputs(q_values: Tensor, q_scales: Optional[Tensor], cache: Tensor,
                            page_size: int, head_dim: int, format: str, weights: Tensor,
                            context_lens: Tensor, block_table: Tensor, k: int, with_scores: bool,
                            num_blocks: int, block_size: int,
                            candidates: Optional[Tensor] = None, candidate_block_size: int = 0,
                            sorted: bool = False,
                            path: str = "auto") -> Tuple[Tensor, Tensor, Tensor]:
    scores, blocks = _outputs(weights, k, with_scores, num_blocks)
    asked_scores, asked_blocks = _asked(with_scores, num_blocks, scores, blocks)
    result = _ops.indexer_decode(
        _q(q_values, q_scales), PagedKCache(cache, page_size, head_dim, format), weights,
        context_lens, block_table, k, sorted=sorted, path=path, candidates=candidates,
        candidate_block_size=candidate_block_size, scores=asked_scores,
        candidate_source=asked_blocks, candidate_source_block_size=block_size)
    topk = result.topk if isinstance(result, _ops.IndexerOutputs) else result
    return topk, scores, blocks


@_indexer_decode_outputs.register_fake
def _(q_values, q_scales, cache, page_size, head_dim, format, weights, context_lens, block_table,
      k, with_scores, num_blocks, block_size, candidates=None, candidate_block_size=0,
      sorted=False, path="auto"):
    scores, blocks = _outputs(weights, k, with_scores, num_blocks)
    return weights.new_empty((weights.shape[0], k), dtype=torch.int32), scores, blocks


def _result(topk, scores, blocks, with_scores, num_blocks):
    return _ops.IndexerOutputs(topk, scores if with_scores else None,
                               blocks if num_blocks > 0 else None)


def indexer_prefill_outputs(q_values, q_scales, keys, weights, ks, ke, k, *, sorted, min_row_keys,
                            candidates, candidate_block_size, scores, candidate_source,
                            candidate_source_block_size):
    """flashindexer.torch.indexer_prefill with scores (bool) or candidate_source (C, an int):
    IndexerOutputs(topk, scores or None, candidate_blocks or None)."""
    with_scores = bool(scores)
    num_blocks = int(candidate_source or 0)
    topk, s, b = torch.ops.flashindexer.indexer_prefill_outputs(
        q_values, q_scales, keys[0], keys[1], weights, ks, ke, k, with_scores, num_blocks,
        candidate_source_block_size, candidates, candidate_block_size, sorted, min_row_keys)
    return _result(topk, s, b, with_scores, num_blocks)


def indexer_decode_outputs(q_values, q_scales, cache: PagedKCache, weights, context_lens,
                           block_table, k, *, sorted, candidates, candidate_block_size, scores,
                           candidate_source, candidate_source_block_size):
    """flashindexer.torch.indexer_decode with scores or candidate_source (as above)."""
    with_scores = bool(scores)
    num_blocks = int(candidate_source or 0)
    topk, s, b = torch.ops.flashindexer.indexer_decode_outputs(
        q_values, q_scales, cache.data, cache.page_size, cache.head_dim, cache.format, weights,
        context_lens, block_table, k, with_scores, num_blocks, candidate_source_block_size,
        candidates, candidate_block_size, sorted)
    return _result(topk, s, b, with_scores, num_blocks)
