# SPDX-License-Identifier: Apache-2.0
"""mqa_logits, paged_mqa_logits and the indexer ops: within the derived fp32 tolerance of the
reference, and the indexer exactly equal to top-k of the logits op."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference

from conftest import decode_problem, prefill_problem


def _assert_close_where_visible(logits, exact, tolerance):
    visible = np.isfinite(exact)
    assert (np.isneginf(logits) == ~visible).all(), "-inf exactly outside the visible ranges"
    error = np.abs(logits.astype(np.float64)[visible] - exact[visible])
    assert (error <= np.broadcast_to(tolerance, exact.shape)[visible]).all()


@pytest.mark.parametrize("heads,dim", [(32, 128), (64, 64)])
def test_mqa_logits_match_reference(rng, heads, dim):
    q, keys, weights, ks, ke = prefill_problem(rng, heads=heads, dim=dim)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    exact = reference.mqa_logits(q, keys, weights, ks, ke).astype(np.float64)
    _assert_close_where_visible(logits, exact, reference.score_tolerance(q, keys, weights))


def test_mqa_logits_mxfp4(rng):
    rows, n, heads, dim = 6, 300, 32, 128
    q = tuple(fi.quantize_mxfp4(rng.standard_normal((rows, heads, dim), np.float32)))
    keys = tuple(fi.quantize_mxfp4(rng.standard_normal((n, dim), np.float32)))
    weights = rng.standard_normal((rows, heads), np.float32)
    ks, ke = np.zeros(rows, np.int32), np.full(rows, n, np.int32)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    exact = reference.mqa_logits(q, keys, weights, ks, ke).astype(np.float64)
    _assert_close_where_visible(logits, exact, reference.score_tolerance(q, keys, weights))


def test_mqa_logits_into_padded_rows_without_clean(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    storage = np.full((len(ks), keys.values.shape[0] + 16), 5.0, np.float32)
    out = storage[:, :keys.values.shape[0]]
    fi.mqa_logits(q, keys, weights, ks, ke, clean=False, out=out)
    assert (storage[:, -16:] == 5.0).all()
    expected = fi.mqa_logits(q, keys, weights, ks, ke)
    visible = np.isfinite(expected)
    np.testing.assert_array_equal(out[visible], expected[visible])


@pytest.mark.parametrize("k", [1, 64, 700])
def test_indexer_prefill_equals_topk_of_logits(rng, k):
    q, keys, weights, ks, ke = prefill_problem(rng)
    top = fi.indexer_prefill(q, keys, weights, ks, ke, k, sorted=True)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    np.testing.assert_array_equal(top, fi.topk_per_row(logits, k, ks=ks, ke=ke, sorted=True))
    exact = reference.mqa_logits(q, keys, weights, ks, ke).astype(np.float64)
    reference.check_topk(top, exact, k, reference.score_tolerance(q, keys, weights), starts=ks)


def test_indexer_prefill_with_caller_workspace(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    workspace = np.empty(fi.indexer_cpu_workspace_size(32, threads=2), np.uint8)
    top = fi.indexer_prefill(q, keys, weights, ks, ke, 32, sorted=True, workspace=workspace,
                             cpu_threads=2)
    np.testing.assert_array_equal(top, fi.indexer_prefill(q, keys, weights, ks, ke, 32,
                                                          sorted=True))


@pytest.mark.parametrize("path", ["auto", "dense", "fused"])
def test_indexer_path_is_ignored_on_the_cpu(rng, path):
    q, keys, weights, ks, ke = prefill_problem(rng)
    np.testing.assert_array_equal(
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, sorted=True, path=path),
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, sorted=True))


def test_auto_path_takes_the_fused_one_for_rows_known_to_be_long(rng):
    # The measured thresholds (the fewest keys every row must see), written out so that a change
    # of the rule shows here: 45056 keys up to k = 2048, the largest k "auto" sends to the fused
    # path; less at smaller k.
    long = 45056
    assert fi.cuda_prefill_path(2048) == "dense"
    assert fi.cuda_prefill_path(2048, min_row_keys=long - 1) == "dense"
    assert fi.cuda_prefill_path(2048, min_row_keys=long) == "fused"
    assert fi.cuda_prefill_path(4096, min_row_keys=long) == "dense"
    assert fi.cuda_prefill_path(4096, path="fused") == "fused"
    assert fi.cuda_prefill_path(512, path="dense", min_row_keys=long) == "dense"
    for k, keys in ((512, 28672), (1024, 36864), (1025, long)):  # the threshold falls with k
        assert fi.cuda_prefill_path(k, min_row_keys=keys - 1) == "dense"
        assert fi.cuda_prefill_path(k, min_row_keys=keys) == "fused"
    # and further in a chunk of several requests (its keys at least twice what its shortest row
    # sees)
    ratio = 2
    for k, keys in ((512, 17408), (1024, 23552), (2048, 34816)):
        assert fi.cuda_prefill_path(k, min_row_keys=keys, num_keys=ratio * keys) == "fused"
        assert fi.cuda_prefill_path(k, min_row_keys=keys - 1, num_keys=ratio * keys) == "dense"
        assert fi.cuda_prefill_path(k, min_row_keys=keys, num_keys=ratio * keys - 1) == "dense"
    q, keys, weights, ks, ke = prefill_problem(rng)
    np.testing.assert_array_equal(  # a hint (even a wrong one) never changes the answer
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, sorted=True, min_row_keys=long),
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, sorted=True))
    with pytest.raises(ValueError, match="indexer_prefill: indexer_options.min_row_keys is -1"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, min_row_keys=-1)


def test_indexer_rejects_an_unknown_path(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    with pytest.raises(ValueError, match="indexer_prefill: path is \"fast\""):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, path="fast")


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_paged_logits_and_decode_match_reference(rng, fmt):
    q, paged, weights = decode_problem(rng, fmt=fmt)
    args = (q, paged.cache, weights, paged.seq_lens, paged.block_table)
    logits = fi.paged_mqa_logits(*args)
    exact = reference.paged_mqa_logits(*args).astype(np.float64)
    tolerance = reference.paged_score_tolerance(*args)
    _assert_close_where_visible(logits, exact, tolerance)
    top = fi.indexer_decode(*args, 40, sorted=True)
    next_n = 2
    np.testing.assert_array_equal(
        top, fi.topk_per_row(logits, 40, lengths=paged.seq_lens, next_n=next_n, sorted=True))
    reference.check_topk(top, exact, 40, tolerance)


def test_decode_with_two_dimensional_context_lens(rng):
    q, paged, weights = decode_problem(rng, batch=2, next_n=2)
    lens = np.stack([paged.seq_lens - 1, paged.seq_lens], axis=1).astype(np.int32)
    top = fi.indexer_decode(q, paged.cache, weights, lens, paged.block_table, 8, sorted=True)
    logits = fi.paged_mqa_logits(q, paged.cache, weights, lens, paged.block_table)
    np.testing.assert_array_equal(top, fi.topk_per_row(logits, 8, lengths=lens.reshape(-1),
                                                       sorted=True))


def test_scoring_errors_name_the_argument(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    with pytest.raises(ValueError, match="indexer_prefill: weights has shape"):
        fi.indexer_prefill(q, keys, weights[:, :16], ks, ke, 8)
    with pytest.raises(ValueError, match="q.values has H=16 heads, expected 32 or 64"):
        fi.indexer_prefill(q[:, :16], keys, weights[:, :16], ks, ke, 8)
    with pytest.raises(TypeError, match="keys.scales has dtype"):
        fi.indexer_prefill(q, (keys.values, keys.scales.astype(np.int32)), weights, ks, ke, 8)
    bad_ke = ke.copy()
    bad_ke[1] = keys.values.shape[0] + 1
    with pytest.raises(ValueError, match="row 1 has ks="):
        fi.mqa_logits(q, keys, weights, ks, bad_ke)
    q_decode, paged, w_decode = decode_problem(rng)
    table = paged.block_table.copy()
    table[0, 0] = 10_000
    with pytest.raises(ValueError, match=r"block_table\[0, 0\]=10000 is out of range"):
        fi.indexer_decode(q_decode, paged.cache, w_decode, paged.seq_lens, table, 8)


# ------------------------------------------------------------------------------------------
# CUDA (skipped without a GPU, PyTorch with CUDA and the CUDA backend)


def _cuda(torch, array):
    """A NumPy array (FP8 as its bytes) as a PyTorch CUDA tensor."""
    array = np.ascontiguousarray(array)
    if array.dtype.itemsize == 1 and array.dtype != np.uint8:
        array = array.view(np.uint8)
    return torch.from_numpy(array).cuda()


def test_cuda_logits_match_the_reference(cuda_torch, rng):
    torch = cuda_torch
    q, keys, weights, ks, ke = prefill_problem(rng, rows=40, keys=900, heads=64)
    logits = fi.mqa_logits(_cuda(torch, q), (_cuda(torch, keys.values), _cuda(torch, keys.scales)),
                           _cuda(torch, weights), _cuda(torch, ks), _cuda(torch, ke))
    exact = reference.mqa_logits(q, keys, weights, ks, ke).astype(np.float64)
    _assert_close_where_visible(logits.cpu().numpy(), exact,
                                reference.score_tolerance(q, keys, weights, tensor_cores=True))


def test_cuda_mxfp4_logits_with_a_workspace_have_the_same_bits(cuda_torch, rng):
    torch = cuda_torch
    rows, n, heads, dim = 70, 1500, 64, 128
    q = [_cuda(torch, x) for x in fi.quantize_mxfp4(rng.standard_normal((rows, heads, dim),
                                                                        np.float32))]
    keys = [_cuda(torch, x) for x in fi.quantize_mxfp4(rng.standard_normal((n, dim), np.float32))]
    weights = _cuda(torch, rng.standard_normal((rows, heads), np.float32))
    ks = _cuda(torch, rng.integers(0, n // 2, rows, dtype=np.int32))
    ke = _cuda(torch, np.full(rows, n, np.int32))
    plain = fi.mqa_logits(tuple(q), tuple(keys), weights, ks, ke)
    workspace = torch.full((fi.mqa_logits_cuda_workspace_size(rows, heads, n),), 0xAB,
                           dtype=torch.uint8, device="cuda")
    converted = fi.mqa_logits(tuple(q), tuple(keys), weights, ks, ke, workspace=workspace)
    assert torch.equal(plain.view(torch.int32), converted.view(torch.int32))
    # The torch op converts through a workspace of its own.
    fi_torch = pytest.importorskip("flashindexer.torch")
    op = fi_torch.mqa_logits(tuple(q), tuple(keys), weights, ks, ke)
    assert torch.equal(plain.view(torch.int32), op.view(torch.int32))


def test_cuda_paged_logits_match_the_reference(cuda_torch, rng):
    torch = cuda_torch
    q, paged, weights = decode_problem(rng, batch=4, next_n=2, heads=64, page_size=64)
    cache = fi.PagedKCache(_cuda(torch, paged.cache.data), 64, 128, "fp8")
    logits = fi.paged_mqa_logits(_cuda(torch, q), cache, _cuda(torch, weights),
                                 _cuda(torch, paged.seq_lens), _cuda(torch, paged.block_table))
    args = (q, paged.cache, weights, paged.seq_lens, paged.block_table)
    exact = reference.paged_mqa_logits(*args).astype(np.float64)
    _assert_close_where_visible(logits.cpu().numpy(), exact,
                                reference.paged_score_tolerance(*args, tensor_cores=True))


def test_indexer_keeps_no_default_workspace_on_the_cpu(rng):
    from flashindexer import ops

    before = dict(ops._default_workspaces)
    q, keys, weights, ks, ke = prefill_problem(rng)
    fi.indexer_prefill(q, keys, weights, ks, ke, 16)
    assert ops._default_workspaces == before
