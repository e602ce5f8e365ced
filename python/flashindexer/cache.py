"""The paged indexer K cache as Python sees it, and helpers to build one.

A page holds ``page_size`` keys: FP8 pages hold all keys' D e4m3 bytes, then their fp32 scales
(D + 4 bytes per key); MXFP4 pages all keys' D/2 packed E2M1 bytes, then their D/32 UE8M0 bytes.
``data`` is a uint8 tensor ``[num_pages, >= page bytes]`` (pages may be padded: the page stride
is the tensor's row stride) or ``[num_pages, page_size, bytes per key]`` (vLLM's layout).
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from . import _C, _tensors

FORMATS = ("fp8", "mxfp4")


@dataclass
class PagedKCache:
    """A paged K cache: uint8 page bytes plus the layout that reads them."""

    data: Any
    page_size: int = 64
    head_dim: int = 128
    format: str = "fp8"

    @property
    def num_pages(self):
        return int(self.data.shape[0])

    @property
    def page_bytes(self):
        """Bytes a page needs: page_size * bytes_per_key."""
        return page_bytes(self.format, self.page_size, self.head_dim)


def bytes_per_key(format="fp8", head_dim=128):
    """D + 4 (FP8) or D/2 + D/32 (MXFP4)."""
    return int(_C.bytes_per_key(format, head_dim))


def page_bytes(format="fp8", page_size=64, head_dim=128):
    """page_size * bytes_per_key(format, head_dim)."""
    return int(_C.page_bytes(format, page_size, head_dim))


def empty_k_cache(num_pages, page_size=64, head_dim=128, format="fp8", *, like=None):
    """A zero-filled PagedKCache of ``num_pages`` pages.

    like: a tensor whose framework and device the pages follow (default: NumPy on the CPU).
    """
    data = np.zeros((num_pages, page_bytes(format, page_size, head_dim)), dtype=np.uint8)
    if like is not None:
        data = _tensors.from_numpy(like, data)
    return PagedKCache(data, page_size, head_dim, format)


class PagedKeys(NamedTuple):
    """What build_k_cache returns: the cache, each request's pages and its key count."""

    cache: PagedKCache
    block_table: Any  # [B, max pages] int32; unused entries are 0
    seq_lens: Any  # [B] int32


def build_k_cache(sequences, page_size=64, format="fp8", *, shuffle_pages=False, seed=0):
    """Quantizes each request's keys into a new paged cache.

    sequences: a list of [n_b, D] float32 or bfloat16 tensors (one per request, one framework
    and device). Request b's keys get pages of their own, in order, or in a random permutation
    of the pages when ``shuffle_pages`` (as an engine's allocator leaves them).
    Returns PagedKeys(cache, block_table [B, P] int32, seq_lens [B] int32) beside the keys.
    """
    if not sequences:
        raise ValueError("build_k_cache: sequences is empty, expected one [n, D] tensor per "
                         "request")
    like = sequences[0]
    head_dim = int(like.shape[-1])
    lengths = [int(s.shape[0]) for s in sequences]
    pages_per_request = [(n + page_size - 1) // page_size for n in lengths]
    total_pages = sum(pages_per_request)
    order = np.arange(total_pages, dtype=np.int32)
    if shuffle_pages:
        order = np.random.default_rng(seed).permutation(total_pages).astype(np.int32)
    block_table = np.zeros((len(sequences), max(max(pages_per_request), 1)), dtype=np.int32)
    first = 0
    for b, pages in enumerate(pages_per_request):
        block_table[b, :pages] = order[first:first + pages]
        first += pages
    cache = empty_k_cache(max(total_pages, 1), page_size, head_dim, format, like=like)
    from .ops import insert_k_cache

    for b, keys in enumerate(sequences):
        positions = np.arange(lengths[b], dtype=np.int64)
        slots = block_table[b, positions // page_size].astype(np.int64) * page_size + (
            positions % page_size
        )
        insert_k_cache(cache, keys, _tensors.from_numpy(like, slots))
    return PagedKeys(
        cache,
        _tensors.from_numpy(like, block_table),
        _tensors.from_numpy(like, np.asarray(lengths, dtype=np.int32)),
    )
