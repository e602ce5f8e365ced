# SPDX-License-Identifier: Apache-2.0
"""A DeepSeek-V4.1 consumer step's sparse rows as PyTorch custom ops; imported by
``flashindexer.torch``, which re-exports the wrappers below. Built once a step, the rows go to
each consumer layer's indexer op as candidate_rows (flashindexer.candidates).

torch.ops.flashindexer.build_sparse_consumer_rows_prefill(candidates, block_size, ks, ke,
    num_keys) -> [sparse_consumer_rows_size(M, C, cb)] uint8
torch.ops.flashindexer.build_sparse_consumer_rows_decode(candidates, block_size, context_lens,
    block_table, next_n, cache, page_size, head_dim, format) -> the same
"""

import torch
from torch import Tensor

from . import candidates as _candidates
from .cache import PagedKCache


def _rows_like(candidates, block_size):
    size = _candidates.sparse_consumer_rows_size(candidates.shape[0], candidates.shape[1],
                                                 block_size)
    return candidates.new_empty((max(size, 1),), dtype=torch.uint8)


@torch.library.custom_op("flashindexer::build_sparse_consumer_rows_prefill", mutates_args=())
def _build_prefill(candidates: Tensor, block_size: int, ks: Tensor, ke: Tensor,
                   num_keys: int) -> Tensor:
    return _candidates.build_sparse_consumer_rows_prefill(
        candidates, block_size, ks, ke, num_keys, out=_rows_like(candidates, block_size))


@_build_prefill.register_fake
def _(candidates, block_size, ks, ke, num_keys):
    return _rows_like(candidates, block_size)


@torch.library.custom_op("flashindexer::build_sparse_consumer_rows_decode", mutates_args=())
def _build_decode(candidates: Tensor, block_size: int, context_lens: Tensor, block_table: Tensor,
                  next_n: int, cache: Tensor, page_size: int, head_dim: int,
                  format: str) -> Tensor:
    return _candidates.build_sparse_consumer_rows_decode(
        candidates, block_size, context_lens, block_table, next_n,
        PagedKCache(cache, page_size, head_dim, format), out=_rows_like(candidates, block_size))


@_build_decode.register_fake
def _(candidates, block_size, context_lens, block_table, next_n, cache, page_size, head_dim,
      format):
    return _rows_like(candidates, block_size)


def build_sparse_consumer_rows_prefill(candidates, block_size, ks, ke, num_keys):
    return torch.ops.flashindexer.build_sparse_consumer_rows_prefill(candidates, block_size, ks,
                                                                     ke, num_keys)


def build_sparse_consumer_rows_decode(candidates, block_size, context_lens, block_table, next_n,
                                      cache: PagedKCache):
    return torch.ops.flashindexer.build_sparse_consumer_rows_decode(
        candidates, block_size, context_lens, block_table, next_n, cache.data, cache.page_size,
        cache.head_dim, cache.format)
