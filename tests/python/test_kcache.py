# SPDX-License-Identifier: Apache-2.0
"""The paged K cache: insert, gather, page layouts and strides."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_gather_returns_what_was_inserted(rng, fmt):
    sequences = [rng.standard_normal((n, 128), np.float32) for n in (5, 70, 33)]
    paged = fi.build_k_cache(sequences, page_size=16, format=fmt, shuffle_pages=True)
    cu = np.concatenate([[0], np.cumsum(paged.seq_lens)]).astype(np.int32)
    values, scales = fi.gather_k_workspace(paged.cache, paged.block_table, cu)
    quantize = fi.quantize_k_fp8 if fmt == "fp8" else fi.quantize_mxfp4
    expected_values, expected_scales = quantize(np.concatenate(sequences))
    np.testing.assert_array_equal(np.asarray(values).view(np.uint8),
                                  np.asarray(expected_values).view(np.uint8))
    np.testing.assert_array_equal(scales, expected_scales)


def test_insert_skips_negative_slots_and_ignores_padding_rows(rng):
    cache = fi.empty_k_cache(2, page_size=4, head_dim=64)
    keys = rng.standard_normal((6, 64), np.float32)  # rows beyond slot_mapping are padding
    fi.insert_k_cache(cache, keys, np.array([0, -1, 7], np.int64))
    values, scales = reference.read_k_cache(cache, np.array([[0, 1]], np.int32), 0, 8)
    expected_values, expected_scales = reference.quantize_k_fp8(keys[[0, 2]])
    np.testing.assert_array_equal(values[[0, 7]], reference.decode_e4m3(expected_values))
    np.testing.assert_array_equal(scales[[0, 7]], expected_scales)
    assert (values[1:7] == 0).all()


def test_padded_pages_and_rank3_layout_read_the_same(rng):
    page_size, dim, pages = 8, 128, 3
    page_bytes = fi.page_bytes("fp8", page_size, dim)
    padded = fi.PagedKCache(np.zeros((pages, page_bytes + 64), np.uint8)[:, :page_bytes + 4],
                            page_size, dim, "fp8")
    keys = rng.standard_normal((20, dim), np.float32)
    slots = np.arange(20, dtype=np.int64)
    fi.insert_k_cache(padded, keys, slots)
    dense = fi.empty_k_cache(pages, page_size, dim, "fp8")
    fi.insert_k_cache(dense, keys, slots)
    np.testing.assert_array_equal(padded.data[:, :page_bytes], dense.data)
    rank3 = fi.PagedKCache(dense.data.reshape(pages, page_size, dim + 4), page_size, dim, "fp8")
    table, cu = np.array([[2, 0, 1]], np.int32), np.array([0, 20], np.int32)
    a = fi.gather_k_workspace(padded, table, cu)
    b = fi.gather_k_workspace(rank3, table, cu)
    np.testing.assert_array_equal(np.asarray(a.values).view(np.uint8),
                                  np.asarray(b.values).view(np.uint8))


def test_cache_errors_name_the_argument(rng):
    keys = rng.standard_normal((4, 128), np.float32)
    small = fi.PagedKCache(np.zeros((2, 100), np.uint8), 64, 128, "fp8")
    with pytest.raises(ValueError, match="cache.data holds 100 bytes per page, expected at least"):
        fi.insert_k_cache(small, keys, np.arange(4))
    with pytest.raises(ValueError, match='format is "fp4"'):
        fi.insert_k_cache(fi.PagedKCache(np.zeros((2, 8448), np.uint8), 64, 128, "fp4"), keys,
                          np.arange(4))
    with pytest.raises(TypeError, match="cache.data has dtype f32"):
        fi.insert_k_cache(fi.PagedKCache(np.zeros((2, 8448), np.float32), 64, 128), keys,
                          np.arange(4))
    cache = fi.empty_k_cache(1, 4, 128)
    with pytest.raises(ValueError, match=r"slot_mapping\[0\]=9 is out of range"):
        fi.insert_k_cache(cache, keys, np.array([9], np.int64))
    with pytest.raises(TypeError, match="expected a flashindexer.PagedKCache"):
        fi.insert_k_cache(object(), keys, np.arange(4))
