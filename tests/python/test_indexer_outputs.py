# SPDX-License-Identifier: Apache-2.0
"""The indexer's optional outputs through Python (flashindexer.indexer_prefill / indexer_decode
scores= and candidate_source=, dcp_pack_candidates_from_scores, and the torch custom ops): the
selected scores are mqa_logits' / paged_mqa_logits' bits at the selected columns, the candidate
blocks are select_candidate_blocks of those logits, the top-k is the plain call's."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import dist

from conftest import decode_problem, fp8_keys, fp8_query, prefill_problem


def _selected(logits, top, starts):
    """logits[t, starts[t] + top[t, i]] (-inf where top is -1), as float32 bits."""
    rows, k = top.shape
    want = np.full((rows, k), -np.inf, np.float32)
    for t in range(rows):
        for i in range(k):
            if top[t, i] >= 0:
                want[t, i] = logits[t, starts[t] + top[t, i]]
    return want.view(np.uint32)


@pytest.mark.parametrize("sorted_", [False, True])
def test_prefill_scores_are_the_logits_bits(rng, sorted_):
    q, keys, weights, ks, ke = prefill_problem(rng, rows=14, keys=700)
    weights[1] = np.where(weights[1] < 0, -3e38, 3e38)  # head sums overflow: +-inf, NaN
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    result = fi.indexer_prefill(q, keys, weights, ks, ke, 50, sorted=sorted_, scores=True)
    assert isinstance(result, fi.IndexerOutputs) and result.candidate_blocks is None
    expected = fi.topk_per_row(logits, 50, ks=ks, ke=ke, sorted=sorted_)
    np.testing.assert_array_equal(result.topk, expected)
    assert result.scores.dtype == np.float32 and result.scores.shape == (14, 50)
    np.testing.assert_array_equal(result.scores.view(np.uint32), _selected(logits, expected, ks))
    # Into the caller's tensor, columns past k untouched.
    scores = np.full((14, 53), 7.0, np.float32)
    fi.indexer_prefill(q, keys, weights, ks, ke, 50, sorted=sorted_, scores=scores)
    np.testing.assert_array_equal(scores[:, :50].view(np.uint32), result.scores.view(np.uint32))
    assert (scores[:, 50:] == 7.0).all()


@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_decode_scores_and_candidate_blocks(rng, next_n):
    q, paged, weights = decode_problem(rng, batch=3, next_n=next_n)
    args = (q, paged.cache, weights, paged.seq_lens, paged.block_table)
    logits = fi.paged_mqa_logits(*args)
    result = fi.indexer_decode(*args, 40, sorted=True, scores=True, candidate_source=16,
                               candidate_source_block_size=8)
    expected = fi.topk_per_row(logits, 40, lengths=paged.seq_lens, next_n=next_n, sorted=True)
    np.testing.assert_array_equal(result.topk, expected)
    zeros = np.zeros(expected.shape[0], np.int64)
    np.testing.assert_array_equal(result.scores.view(np.uint32), _selected(logits, expected, zeros))
    rows = expected.shape[0]
    ends = np.array([max(paged.seq_lens[r // next_n] - next_n + r % next_n + 1, 0)
                     for r in range(rows)], np.int32)
    np.testing.assert_array_equal(result.candidate_blocks,
                                  fi.select_candidate_blocks(logits, 16, 8, ke=ends))


@pytest.mark.parametrize("block_size", [1, 8, 5])
def test_prefill_candidate_source_equals_select_candidate_blocks(rng, block_size):
    q, keys, weights, ks, ke = prefill_problem(rng, rows=10, keys=900)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    for threads in (1, 3):
        result = fi.indexer_prefill(q, keys, weights, ks, ke, 32, candidate_source=24,
                                    candidate_source_block_size=block_size, cpu_threads=threads)
        assert result.scores is None
        np.testing.assert_array_equal(result.topk, fi.topk_per_row(logits, 32, ks=ks, ke=ke))
        np.testing.assert_array_equal(
            result.candidate_blocks, fi.select_candidate_blocks(logits, 24, block_size, ks=ks,
                                                                ke=ke))


def test_without_outputs_the_call_returns_the_top_k_alone(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    top = fi.indexer_prefill(q, keys, weights, ks, ke, 16)
    assert isinstance(top, np.ndarray) and top.shape == (12, 16)


def test_bad_outputs_raise_naming_them(rng):
    q, keys, weights, ks, ke = prefill_problem(rng, rows=8, keys=200)
    with pytest.raises(ValueError, match="indexer_options.scores"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, scores=np.zeros((8, 8), np.float32))
    with pytest.raises(ValueError, match="indexer_options.candidate_source.block_size"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, candidate_source=8)
    blocks = np.zeros((8, 4), np.int32)
    with pytest.raises(NotImplementedError, match="candidate_source"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, candidates=blocks,
                           candidate_block_size=8, candidate_source=4,
                           candidate_source_block_size=8)
    with pytest.raises(NotImplementedError, match="vllm_compatible"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 16, candidates=blocks,
                           candidate_block_size=8, vllm_compatible=True, scores=True)


def test_dcp_pack_from_scores_equals_pack_from_logits_and_the_flow_is_exact(rng):
    ranks, k, rows, n = 3, 24, 6, 400
    q = fp8_query(rng, rows)
    keys = fp8_keys(rng, n)
    weights = rng.standard_normal((rows, 32)).astype(np.float32)
    ks = np.zeros(rows, np.int32)
    ke = rng.integers(0, n + 1, rows).astype(np.int32)
    expected = fi.indexer_prefill(q, keys, weights, ks, ke, k, sorted=True)
    gathered = []
    for rank in range(ranks):
        owned = [g for g in range(n) if dist.dcp_owner(g, ranks) == rank]
        local = fi.QuantizedTensor(np.ascontiguousarray(keys.values[owned]),
                                   np.ascontiguousarray(keys.scales[owned]))
        local_ke = np.array([dist.dcp_local_len(int(e), rank, ranks) for e in ke], np.int32)
        result = fi.indexer_prefill(q, local, weights, ks, local_ke, k, scores=True)
        from_scores = dist.dcp_pack_candidates_from_scores(result.scores, result.topk, k, rank,
                                                           ranks)
        logits = fi.mqa_logits(q, local, weights, ks, local_ke)
        from_logits = dist.dcp_pack_candidates(logits, result.topk, k, rank, ranks, row_starts=ks)
        np.testing.assert_array_equal(from_scores, from_logits)
        gathered.append(from_scores)
    merged = dist.dcp_merge_topk(np.concatenate(gathered, axis=1), k, ranks, sorted=True)
    np.testing.assert_array_equal(merged, expected)


# ----------------------------------------------------------------------------- torch


def test_torch_ops_return_the_outputs(rng, torch):
    fit = pytest.importorskip("flashindexer.torch")
    q, keys, weights, ks, ke = prefill_problem(rng, rows=9, keys=500)
    expected = fi.indexer_prefill(q, keys, weights, ks, ke, 20, sorted=True, scores=True,
                                  candidate_source=12, candidate_source_block_size=8)
    t = [torch.from_numpy(np.asarray(a)) for a in (q.view(np.uint8), weights, ks, ke)]
    t_q = t[0].view(torch.float8_e4m3fn)
    t_keys = (torch.from_numpy(keys.values.view(np.uint8)).view(torch.float8_e4m3fn),
              torch.from_numpy(keys.scales))
    got = fit.indexer_prefill(t_q, t_keys, t[1], t[2], t[3], 20, sorted=True, scores=True,
                              candidate_source=12, candidate_source_block_size=8)
    np.testing.assert_array_equal(got.topk.numpy(), expected.topk)
    np.testing.assert_array_equal(got.scores.numpy().view(np.uint32),
                                  expected.scores.view(np.uint32))
    np.testing.assert_array_equal(got.candidate_blocks.numpy(), expected.candidate_blocks)
    only_scores = fit.indexer_prefill(t_q, t_keys, t[1], t[2], t[3], 20, sorted=True, scores=True)
    assert only_scores.candidate_blocks is None
    np.testing.assert_array_equal(only_scores.scores.numpy(), got.scores.numpy())


def test_torch_outputs_on_cuda_equal_the_cpu_logits_bits(rng, cuda_torch):
    torch = cuda_torch
    fit = pytest.importorskip("flashindexer.torch")
    q, keys, weights, ks, ke = prefill_problem(rng, rows=24, keys=20000)
    dev = [torch.from_numpy(np.asarray(a)).cuda() for a in (q.view(np.uint8), weights, ks, ke)]
    d_q = dev[0].view(torch.float8_e4m3fn)
    d_keys = (torch.from_numpy(keys.values.view(np.uint8)).cuda().view(torch.float8_e4m3fn),
              torch.from_numpy(keys.scales).cuda())
    logits = fi.mqa_logits(d_q, d_keys, dev[1], dev[2], dev[3]).cpu().numpy()
    for path in ("dense", "fused"):
        result = fi.indexer_prefill(d_q, d_keys, dev[1], dev[2], dev[3], 512, sorted=True,
                                    path=path, scores=True)
        top = result.topk.cpu().numpy()
        np.testing.assert_array_equal(top, fi.topk_per_row(logits, 512, ks=ks, ke=ke, sorted=True))
        np.testing.assert_array_equal(result.scores.cpu().numpy().view(np.uint32),
                                      _selected(logits, top, ks))
    blocks = fi.select_candidate_blocks(logits, 2048, 8, ks=ks, ke=ke)
    source = fit.indexer_prefill(d_q, d_keys, dev[1], dev[2], dev[3], 512, candidate_source=2048,
                                 candidate_source_block_size=8)
    np.testing.assert_array_equal(source.candidate_blocks.cpu().numpy(), blocks)
    # The fused path publishes the same blocks from its scan, with a workspace sized for them.
    workspace = torch.empty(fi.indexer_cuda_workspace_size(512, candidate_source=2048,
                                                           candidate_source_block_size=8),
                            dtype=torch.uint8, device="cuda")
    assert workspace.numel() > fi.indexer_cuda_workspace_size(512)
    fused = fi.indexer_prefill(d_q, d_keys, dev[1], dev[2], dev[3], 512, sorted=True, path="fused",
                               workspace=workspace, candidate_source=2048,
                               candidate_source_block_size=8)
    np.testing.assert_array_equal(fused.candidate_blocks.cpu().numpy(), blocks)
    np.testing.assert_array_equal(fused.topk.cpu().numpy(),
                                  fi.topk_per_row(logits, 512, ks=ks, ke=ke, sorted=True))


def test_consumer_step_rows_built_once_serve_every_layer_on_cuda(rng, cuda_torch):
    torch = cuda_torch
    rows, n_keys, cb, C, k = 40, 30000, 8, 256, 128
    _, _, _, ks, ke = prefill_problem(rng, rows=rows, keys=n_keys)
    d_ks, d_ke = torch.from_numpy(ks).cuda(), torch.from_numpy(ke).cuda()
    cand = torch.randint(-1, (n_keys + cb - 1) // cb, (rows, C), dtype=torch.int32).cuda()
    step_rows = fi.build_sparse_consumer_rows_prefill(cand, cb, d_ks, d_ke, n_keys)
    assert step_rows.dtype == torch.uint8 and step_rows.is_cuda
    assert step_rows.numel() == fi.sparse_consumer_rows_size(rows, C, cb)
    for _ in range(2):  # two layers of the step: their own queries, weights and keys
        q, keys, weights, _, _ = prefill_problem(rng, rows=rows, keys=n_keys)
        d_q = torch.from_numpy(q.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        d_keys = (torch.from_numpy(keys.values.view(np.uint8)).cuda().view(torch.float8_e4m3fn),
                  torch.from_numpy(keys.scales).cuda())
        d_w = torch.from_numpy(weights).cuda()
        args = (d_q, d_keys, d_w, d_ks, d_ke, k)
        common = dict(sorted=True, candidates=cand, candidate_block_size=cb)
        dense = fi.indexer_prefill(*args, path="dense", **common)
        sparse = fi.indexer_prefill(*args, path="sparse", **common)
        shared = fi.indexer_prefill(*args, path="sparse", candidate_rows=step_rows, **common)
        assert torch.equal(sparse, dense) and torch.equal(shared, dense)
        # The custom ops: the rows built by one, read by the consumer op (kAuto takes the
        # sparse path: the context is over 4 x C x cb).
        fit = pytest.importorskip("flashindexer.torch")
        op_rows = fit.build_sparse_consumer_rows_prefill(cand, cb, d_ks, d_ke, n_keys)
        op_top = fit.indexer_prefill(d_q, d_keys, d_w, d_ks, d_ke, k, sorted=True, candidates=cand,
                                     candidate_block_size=cb, candidate_rows=op_rows)
        assert torch.equal(op_top, dense)
    with pytest.raises(ValueError, match="sparse_rows"):
        fi.indexer_prefill(*args, path="sparse", candidate_rows=step_rows[:100], **common)


def test_consumer_step_rows_are_refused_on_the_cpu(rng):
    q, keys, weights, ks, ke = prefill_problem(rng, rows=6, keys=300)
    cand = np.zeros((6, 4), np.int32)
    with pytest.raises(ValueError, match="candidates.blocks"):
        fi.build_sparse_consumer_rows_prefill(cand, 8, ks, ke, 300, out=np.zeros(64, np.uint8))
    with pytest.raises(ValueError, match="CPU consumer takes none"):
        fi.indexer_prefill(q, keys, weights, ks, ke, 8, candidates=cand, candidate_block_size=8,
                           candidate_rows=np.zeros(64, np.uint8))
