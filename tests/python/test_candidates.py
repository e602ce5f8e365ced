# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V4.1 candidate blocks: the source's blocks, vLLM's mask, the dense consumer (exact and
vLLM-compatible), the sparse metadata and remap, against NumPy restatements of spec §8; the
consumer form of the indexer ops; the torch custom ops; clear errors."""

import numpy as np
import pytest

import flashindexer as fi
from conftest import fp8_keys, fp8_query


def ranked(scores, positions):
    """positions sorted by the top-k total order: larger first, NaN below -inf, smaller index."""
    def key(p):
        s = scores[p]
        return (1, 0.0, p) if np.isnan(s) else (0, -float(s), p)
    return sorted(positions, key=key)


def select_blocks(logits, ks, ke, C, cb):
    """§8.2/§8.3 in plain Python."""
    rows, width = logits.shape
    nblocks = -(-width // cb)
    out = np.full((rows, C), -1, np.int32)
    for t in range(rows):
        start, end = ks[t], min(ke[t], width)
        count = max(end - start, 0)
        score = []
        for b in range(nblocks):
            x = logits[t, start + b * cb:min(start + (b + 1) * cb, end)] if b * cb < count else []
            m = -np.inf if len(x) == 0 else (np.inf if np.isnan(x).any() else float(np.max(x)))
            score.append(m)
        if count > 0:
            score[(count - 1) // cb] = np.inf
        order = sorted(range(nblocks), key=lambda b: (-score[b], b))
        for i, b in enumerate(order[:min(C, nblocks)]):
            if score[b] != -np.inf:
                out[t, i] = b
    return out


def consumer(logits, ks, ke, cand, cb, k, vllm):
    rows, width = logits.shape
    out = np.full((rows, k), -1, np.int32)
    x = logits.copy()
    for t in range(rows):
        start, end = ks[t], min(ke[t], width)
        named = {int(c) for c in cand[t] if c >= 0}
        edge = any(ks[t] + c * cb >= width for c in named)
        if vllm:
            for col in range(width):
                keep = ks[t] <= col < ke[t] and (((col - ks[t]) // cb) in named or
                                                  (col == width - 1 and edge))
                if not keep:
                    x[t, col] = -np.inf
            positions = list(range(max(end - start, 0)))
        else:
            positions = [p for p in range(max(end - start, 0)) if p // cb in named]
        best = ranked(x[t, start:], positions)[:k]
        out[t, :len(best)] = best
    return out, x


def bounds(rng, rows, width):
    ks = rng.integers(0, width + 1, rows).astype(np.int32)
    ke = np.minimum(ks + rng.integers(0, width + 1, rows), width).astype(np.int32)
    ks[0], ke[0] = 0, 0
    ks[1], ke[1] = 0, width
    return ks, ke


def special_logits(rng, rows, width):
    x = np.round(rng.standard_normal((rows, width)), 1).astype(np.float32)
    mask = rng.uniform(0, 1, x.shape)
    x[mask < 0.05] = np.nan
    x[(mask >= 0.05) & (mask < 0.08)] = np.inf
    x[(mask >= 0.08) & (mask < 0.12)] = -np.inf
    return x


@pytest.mark.parametrize("cb,C", [(8, 4), (8, 64), (16, 16), (1, 32)])
def test_select_candidate_blocks_matches_the_spec(rng, cb, C):
    logits = special_logits(rng, 16, 700)
    ks, ke = bounds(rng, 16, 700)
    got = fi.select_candidate_blocks(logits, C, cb, ks=ks, ke=ke)
    np.testing.assert_array_equal(got, select_blocks(logits, ks, ke, C, cb))


def test_decode_bounds_with_row_repeat(rng):
    logits = special_logits(rng, 12, 300)
    lengths = rng.integers(0, 301, 4).astype(np.int32)
    got = fi.select_candidate_blocks(logits, 8, 8, ke=lengths, row_repeat=3)
    zeros = np.zeros(12, np.int32)
    np.testing.assert_array_equal(got, select_blocks(logits, zeros, np.repeat(lengths, 3), 8, 8))


@pytest.mark.parametrize("vllm", [False, True])
def test_consumer_matches_the_spec(rng, vllm):
    logits = special_logits(rng, 16, 400)
    ks, ke = bounds(rng, 16, 400)
    cand = fi.select_candidate_blocks(logits, 6, 8, ks=ks, ke=ke)
    cand[rng.uniform(0, 1, cand.shape) < 0.2] = 3  # duplicates
    cand[rng.uniform(0, 1, cand.shape) < 0.1] = 1000  # past the width: the edge flag
    expected, masked = consumer(logits, ks, ke, cand, 8, 60, vllm)
    work = logits.copy()
    got = fi.candidate_topk_per_row(work, cand, 8, 60, ks=ks, ke=ke, sorted=True,
                                    vllm_compatible=vllm)
    np.testing.assert_array_equal(got, expected)
    if vllm:
        np.testing.assert_array_equal(work, masked)
        mask_only = fi.apply_candidate_mask(logits.copy(), cand, 8, ks=ks, ke=ke)
        np.testing.assert_array_equal(mask_only, masked)


def test_sparse_indices_and_remap_follow_the_seed_conventions():
    ks, ke = np.array([13], np.int32), np.array([58], np.int32)
    cand = np.array([[2, -1, 0, 9]], np.int32)
    sparse, end = fi.candidate_blocks_to_sparse_indices(cand, 16, 8, ks=ks, ke=ke)
    np.testing.assert_array_equal(sparse, [[1, 2, 5, 6, 6, 6, 6, 6]])
    np.testing.assert_array_equal(end, [29])
    columns = np.array([[9, 30, -1, 64, 0]], np.int32)
    np.testing.assert_array_equal(fi.sparse_topk_remap(columns, sparse, 8, ks=ks),
                                  [[9, 46, -1, -1, 0]])


def test_sparse_route_equals_the_exact_dense_consumer(rng):
    rows, width, cb, C, k = 10, 900, 16, 8, 40
    logits = np.round(rng.standard_normal((rows, width)), 1).astype(np.float32)
    ks, ke = bounds(rng, rows, width)
    cand = fi.select_candidate_blocks(logits, C, cb, ks=ks, ke=ke)
    sparse, end = fi.candidate_blocks_to_sparse_indices(cand, cb, 8, ks=ks, ke=ke)
    sparse_logits = np.full((rows, sparse.shape[1] * 8), np.nan, np.float32)
    for t in range(rows):
        for j in range(end[t]):
            sparse_logits[t, j] = logits[t, sparse[t, j // 8] * 8 + ks[t] % 8 + j % 8]
    columns = fi.topk_per_row(sparse_logits, k, lengths=end, sorted=True)
    got = fi.sparse_topk_remap(columns, sparse, 8, ks=ks)
    dense = fi.candidate_topk_per_row(logits, cand, cb, k, ks=ks, ke=ke, sorted=True)
    np.testing.assert_array_equal(got, dense)


def test_sparse_mqa_logits_gives_the_dense_logits_bits_and_the_exact_consumer(rng):
    rows, keys, cb, C, k = 12, 700, 16, 8, 40
    q = fp8_query(rng, rows)
    k_cache = fp8_keys(rng, keys)
    weights = rng.standard_normal((rows, 32)).astype(np.float32)
    ks, ke = bounds(rng, rows, keys)
    every = fi.mqa_logits(q, k_cache, weights, np.zeros(rows, np.int32),
                          np.full(rows, keys, np.int32))
    logits = fi.mqa_logits(q, k_cache, weights, ks, ke)
    cand = fi.select_candidate_blocks(logits, C, cb, ks=ks, ke=ke)
    sparse, end = fi.candidate_blocks_to_sparse_indices(cand, cb, 8, ks=ks, ke=ke)
    got = fi.sparse_mqa_logits(q, k_cache, weights, sparse, end, 8, ks=ks, ke=ke)
    assert got.shape == (rows, sparse.shape[1] * 8)
    for t in range(rows):
        for j in range(got.shape[1]):
            if j < end[t]:
                want = every[t, sparse[t, j // 8] * 8 + ks[t] % 8 + j % 8]
                assert got[t, j].view(np.uint32) == want.view(np.uint32), (t, j)
            else:
                assert got[t, j] == -np.inf, (t, j)
    columns = fi.topk_per_row(got, k, lengths=end, sorted=True)
    np.testing.assert_array_equal(
        fi.sparse_topk_remap(columns, sparse, 8, ks=ks),
        fi.candidate_topk_per_row(logits, cand, cb, k, ks=ks, ke=ke, sorted=True))
    with pytest.raises(ValueError, match="sparse_block"):
        fi.sparse_mqa_logits(q, k_cache, weights, sparse, end, 12, ks=ks, ke=ke)


@pytest.mark.parametrize("vllm", [False, True])
def test_indexer_prefill_with_candidates_equals_the_consumer_over_mqa_logits(rng, vllm):
    rows, keys = 12, 500
    q = fp8_query(rng, rows)
    k_cache = fp8_keys(rng, keys)
    weights = rng.standard_normal((rows, 32)).astype(np.float32)
    ks, ke = bounds(rng, rows, keys)
    logits = fi.mqa_logits(q, k_cache, weights, ks, ke)
    cand = fi.select_candidate_blocks(logits, 8, 8, ks=ks, ke=ke)
    expected = fi.candidate_topk_per_row(logits.copy(), cand, 8, 30, ks=ks, ke=ke, sorted=True,
                                         vllm_compatible=vllm)
    got = fi.indexer_prefill(q, k_cache, weights, ks, ke, 30, sorted=True, candidates=cand,
                             candidate_block_size=8, vllm_compatible=vllm)
    np.testing.assert_array_equal(got, expected)


def test_bad_input_raises_naming_the_argument(rng):
    logits = rng.standard_normal((4, 64)).astype(np.float32)
    ke = np.full(4, 64, np.int32)
    with pytest.raises(ValueError, match="num_blocks=5000"):
        fi.select_candidate_blocks(logits, 5000, 8, ke=ke)
    with pytest.raises(ValueError, match="not a multiple of the sparse block"):
        fi.candidate_blocks_to_sparse_indices(np.zeros((4, 8), np.int32), 12, 8, ke=ke)
    with pytest.raises(TypeError, match="candidates"):
        fi.apply_candidate_mask(logits, np.zeros((4, 8), np.int64), 8, ke=ke)


def test_torch_ops_equal_the_numpy_calls(rng):
    torch = pytest.importorskip("torch")
    fit = pytest.importorskip("flashindexer.torch")
    logits = special_logits(rng, 8, 300)
    ks, ke = bounds(rng, 8, 300)
    t_logits, t_ks, t_ke = (torch.from_numpy(a) for a in (logits, ks, ke))
    cand = fit.select_candidate_blocks(t_logits, 8, 8, t_ke, t_ks)
    np.testing.assert_array_equal(cand.numpy(), fi.select_candidate_blocks(logits, 8, 8, ks=ks,
                                                                           ke=ke))
    for vllm in (False, True):
        got = fit.candidate_topk_per_row(t_logits.clone(), cand, 8, 20, t_ke, t_ks, sorted=True,
                                         vllm_compatible=vllm)
        expected = fi.candidate_topk_per_row(logits.copy(), cand.numpy(), 8, 20, ks=ks, ke=ke,
                                             sorted=True, vllm_compatible=vllm)
        np.testing.assert_array_equal(got.numpy(), expected)
    sparse, end = fit.candidate_blocks_to_sparse_indices(cand, 8, 8, t_ke, t_ks)
    expected_sparse, expected_end = fi.candidate_blocks_to_sparse_indices(cand.numpy(), 8, 8,
                                                                          ks=ks, ke=ke)
    np.testing.assert_array_equal(sparse.numpy(), expected_sparse)
    np.testing.assert_array_equal(end.numpy(), expected_end)


def test_torch_sparse_logits_ops_equal_the_plain_calls():
    torch = pytest.importorskip("torch")
    fit = pytest.importorskip("flashindexer.torch")
    from torch.library import opcheck
    generator = torch.Generator().manual_seed(7)
    rows, keys, heads = 6, 400, 32
    q = fi.quantize_k_fp8(torch.randn(rows * heads, 128, generator=generator)).values
    q = q.reshape(rows, heads, 128)
    k_cache = fi.quantize_k_fp8(torch.randn(keys, 128, generator=generator))
    weights = torch.randn(rows, heads, generator=generator)
    ks = torch.tensor([0, 3, 50, 0, 7, 100], dtype=torch.int32)
    ke = torch.tensor([400, 300, 51, 0, 399, 230], dtype=torch.int32)
    cand = torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4) % 9
    sparse, end = fi.candidate_blocks_to_sparse_indices(cand, 8, 8, ks=ks, ke=ke)
    want = fi.sparse_mqa_logits(q, k_cache, weights, sparse, end, 8, ks=ks, ke=ke)
    got = fit.sparse_mqa_logits(q, k_cache, weights, sparse, end, 8, ks, ke)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    opcheck(torch.ops.flashindexer.sparse_mqa_logits,
            (q.view(torch.uint8), None, k_cache.values.view(torch.uint8), k_cache.scales,
             weights, sparse, end, 8, ks, ke))
