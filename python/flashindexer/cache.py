# SPDX-License-Identifier: Apache-2.0
"""The paged indexer K cache as Python sees it (ops.build_k_cache fills one from keys).

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
