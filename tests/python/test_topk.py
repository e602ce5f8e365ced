# SPDX-License-Identifier: Apache-2.0
"""topk_per_row: the total order, visible ranges, strides, workspace, and clear errors."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference


def test_matches_reference_on_prefill_ranges(rng):
    logits = rng.standard_normal((50, 3000)).astype(np.float32)
    ke = rng.integers(0, 3001, 50).astype(np.int32)
    ks = (ke * rng.uniform(0, 1, 50)).astype(np.int32)
    for k in (1, 7, 512, 2048):
        top = fi.topk_per_row(logits, k, ks=ks, ke=ke, sorted=True)
        np.testing.assert_array_equal(top, reference.topk_per_row(logits, k, ks=ks, ke=ke))


def test_ties_nan_and_infinities_follow_the_total_order():
    logits = np.array([[1, np.nan, 1, -np.inf, 1, np.inf, -0.0, 0.0, np.nan, 1]], np.float32)
    ks, ke = np.array([0], np.int32), np.array([10], np.int32)
    top = fi.topk_per_row(logits, 10, ks=ks, ke=ke, sorted=True)
    np.testing.assert_array_equal(top[0], [5, 0, 2, 4, 9, 6, 7, 3, 1, 8])


def test_unsorted_selects_the_same_set(rng):
    logits = np.round(rng.standard_normal((20, 1000)), 1).astype(np.float32)  # many ties
    lengths = rng.integers(0, 1001, 20).astype(np.int32)
    top = fi.topk_per_row(logits, 100, lengths=lengths)
    expected = reference.topk_per_row(logits, 100, lengths=lengths)
    for row, want in zip(top, expected):
        assert sorted(row.tolist()) == sorted(want.tolist())


def test_decode_lengths_with_next_n(rng):
    logits = rng.standard_normal((6, 400)).astype(np.float32)
    lengths = np.array([10, 400, 1], np.int32)
    top = fi.topk_per_row(logits, 16, lengths=lengths, next_n=2, sorted=True)
    np.testing.assert_array_equal(
        top, reference.topk_per_row(logits, 16, lengths=lengths, next_n=2))
    assert (top[4] == -1).all() and top[5, 0] == 0  # lengths 0 and 1


def test_honours_padded_logits_rows_and_wider_output(rng):
    storage = rng.standard_normal((8, 1024)).astype(np.float32)
    logits = storage[:, :1000]  # row stride 1024
    out_storage = np.full((8, 40), 77, np.int32)
    ks, ke = np.zeros(8, np.int32), np.full(8, 1000, np.int32)
    top = fi.topk_per_row(logits, 32, ks=ks, ke=ke, sorted=True, out=out_storage[:, :32])
    assert np.shares_memory(top, out_storage)
    np.testing.assert_array_equal(out_storage[:, :32],
                                  reference.topk_per_row(logits, 32, ks=ks, ke=ke))
    assert (out_storage[:, 32:] == 77).all()


def test_bfloat16_logits(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    logits = rng.standard_normal((4, 300)).astype(ml_dtypes.bfloat16)
    lengths = np.full(4, 300, np.int32)
    top = fi.topk_per_row(logits, 20, lengths=lengths, sorted=True)
    np.testing.assert_array_equal(top, reference.topk_per_row(logits, 20, lengths=lengths))


def test_caller_workspace_is_used_and_checked(rng):
    logits = rng.standard_normal((4, 500)).astype(np.float32)
    lengths = np.full(4, 500, np.int32)
    size = fi.topk_per_row_cpu_workspace_size(64)
    workspace = np.empty(size, np.uint8)
    top = fi.topk_per_row(logits, 64, lengths=lengths, sorted=True, workspace=workspace)
    np.testing.assert_array_equal(top, reference.topk_per_row(logits, 64, lengths=lengths))
    with pytest.raises(ValueError, match="workspace has 16 bytes"):
        fi.topk_per_row(logits, 64, lengths=lengths, workspace=np.empty(16, np.uint8))


def test_errors_name_the_argument():
    logits = np.zeros((4, 100), np.float32)
    ks, ke = np.zeros(4, np.int32), np.full(4, 100, np.int32)
    with pytest.raises(ValueError, match="k=5000 exceeds the maximum 4096"):
        fi.topk_per_row(logits, 5000, ks=ks, ke=ke)
    with pytest.raises(ValueError, match="row 2 has ks=50, ke=10"):
        fi.topk_per_row(logits, 4, ks=np.array([0, 0, 50, 0], np.int32),
                        ke=np.array([1, 1, 10, 1], np.int32))
    with pytest.raises(TypeError, match="topk_per_row: ks has dtype i64, expected i32"):
        fi.topk_per_row(logits, 4, ks=ks.astype(np.int64), ke=ke)
    with pytest.raises(TypeError, match="logits has dtype float64"):
        fi.topk_per_row(logits.astype(np.float64), 4, ks=ks, ke=ke)
    with pytest.raises(ValueError, match="lengths entry 1 is -3"):
        fi.topk_per_row(logits, 4, lengths=np.array([1, -3, 1, 1], np.int32))
    with pytest.raises(ValueError, match="either ks and ke"):
        fi.topk_per_row(logits, 4)
    with pytest.raises(TypeError, match="topk_per_row: logits is a list"):
        fi.topk_per_row([[1.0]], 1, ks=ks, ke=ke)
