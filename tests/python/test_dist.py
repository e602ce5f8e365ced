# SPDX-License-Identifier: Apache-2.0
"""Multi-GPU building blocks with simulated ranks: the DCP key mapping, pack + all-gather + merge
against topk_per_row (and a NumPy oracle) over the un-sharded rows, the TP row-sharding plan."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import dist, reference


def test_mapping_functions_are_inverse_and_match_the_spec():
    for ranks in (1, 2, 3, 8):
        for interleave in (1, 2, 3):
            g = np.arange(500)
            owner = dist.dcp_owner(g, ranks, interleave)
            local = dist.dcp_local(g, ranks, interleave)
            np.testing.assert_array_equal(dist.dcp_global(local, owner, ranks, interleave), g)
            for rank in range(ranks):
                # Each rank stores its keys densely, in global order.
                mine = owner == rank
                np.testing.assert_array_equal(local[mine], np.arange(mine.sum()))
                counts = np.cumsum(owner == rank)
                lengths = dist.dcp_local_len(g + 1, rank, ranks, interleave)
                np.testing.assert_array_equal(lengths, counts)
                assert dist.dcp_local_len(int(g[-1]) + 1, rank, ranks, interleave) == counts[-1]
    # spec §9.1 example: N = 3, I = 2
    assert [dist.dcp_owner(g, 3, 2) for g in range(8)] == [0, 0, 1, 1, 2, 2, 0, 0]


def _special_logits(rng, n):
    values = rng.standard_normal(n).astype(np.float32)
    special = rng.uniform(size=n)
    values[special < 0.05] = np.nan
    values[(special >= 0.05) & (special < 0.1)] = np.inf
    values[(special >= 0.1) & (special < 0.15)] = -np.inf
    values[(special >= 0.15) & (special < 0.3)] = 0.5  # ties across ranks
    values[(special >= 0.3) & (special < 0.35)] = -0.0
    return values


def _simulate(rng, ranks, interleave, k, rows, prefill):
    """Rows of keys in global order, sharded over the ranks.

    Returns (expected [rows, k]: topk_per_row over the concatenated rows, gathered [N, rows, k]:
    every rank's packed candidates, as an all-gather leaves them)."""
    lengths = rng.integers(0, (ranks + 1) * k + 3 * ranks * interleave, rows)
    lengths[0] = 0
    lengths[1 % rows] = min(lengths[1 % rows], ranks * interleave - 1)  # empty ranks
    keys = [_special_logits(rng, int(n)) for n in lengths]

    starts = rng.integers(0, 20, rows) * 2 + 1 if prefill else np.zeros(rows, np.int64)
    full = np.full((rows, int((starts + lengths).max()) + 1), np.nan, np.float32)
    for t, row in enumerate(keys):
        full[t, starts[t]:starts[t] + len(row)] = row
    ks, ke = starts.astype(np.int32), (starts + lengths).astype(np.int32)
    expected = fi.topk_per_row(full, k, ks=ks, ke=ke, sorted=True)
    np.testing.assert_array_equal(expected, reference.topk_per_row(full, k, ks=ks, ke=ke))

    gathered = np.empty((ranks, rows, k), np.int64)
    for rank in range(ranks):
        local_lengths = np.array([dist.dcp_local_len(int(n), rank, ranks, interleave)
                                  for n in lengths])
        local_starts = rng.integers(0, 20, rows) * 2 + 1 if prefill else np.zeros(rows, np.int64)
        local = np.full((rows, int((local_starts + local_lengths).max()) + 1), np.nan, np.float32)
        for t, row in enumerate(keys):
            owned = row[dist.dcp_owner(np.arange(len(row)), ranks, interleave) == rank]
            local[t, local_starts[t]:local_starts[t] + len(owned)] = owned
        lks = local_starts.astype(np.int32)
        lke = (local_starts + local_lengths).astype(np.int32)
        local_topk = fi.topk_per_row(local, k, ks=lks, ke=lke)
        dist.dcp_pack_candidates(local, local_topk, k, rank, ranks, interleave=interleave,
                                 row_starts=lks if prefill else None, out=gathered[rank])
    return expected, gathered


@pytest.mark.parametrize("ranks", [2, 3, 4, 8])
@pytest.mark.parametrize("interleave", [1, 2, 3])
def test_merge_equals_topk_over_concatenated_keys(rng, ranks, interleave):
    for k in (1, 64, 512):
        prefill = bool(rng.integers(2))
        expected, gathered = _simulate(rng, ranks, interleave, k, 5, prefill)
        # Both layouts: the all-gather result [N, rows, k] viewed as [rows, N, k] without a
        # copy, and the candidate-dimension concatenation [rows, N k].
        for view in (gathered.transpose(1, 0, 2),
                     np.ascontiguousarray(gathered.transpose(1, 0, 2)).reshape(5, ranks * k)):
            merged = dist.dcp_merge_topk(view, k, ranks, sorted=True)
            np.testing.assert_array_equal(merged, expected)
            unsorted = dist.dcp_merge_topk(view, k, ranks)
            for got, want in zip(unsorted, expected):
                assert sorted(got.tolist()) == sorted(want.tolist())


def _numpy_merge(gathered, k):
    """Oracle: decode every nonzero key to (score order, id), take the k best."""
    rows = gathered.shape[1]
    out = np.full((rows, k), -1, np.int32)
    for t in range(rows):
        keys = gathered[:, t, :].reshape(-1).view(np.uint64)
        keys = np.sort(keys[keys != 0])[::-1][:k]
        out[t, :len(keys)] = (~(keys & np.uint64(0xFFFFFFFF))).astype(np.uint32).view(np.int32)
    return out


def test_merge_matches_a_numpy_oracle_on_the_packed_keys(rng):
    expected, gathered = _simulate(rng, 4, 2, 128, 6, True)
    np.testing.assert_array_equal(_numpy_merge(gathered, 128), expected)
    np.testing.assert_array_equal(dist.dcp_merge_topk(gathered.transpose(1, 0, 2), 128, 4,
                                                      sorted=True), expected)


def test_packed_key_orders_scores_then_smaller_id():
    logits = np.array([[1.0, np.nan, -np.inf, 1.0, -0.0, 0.0]], np.float32)
    local_topk = np.array([[0, 1, 2, 3, 4, 5, -1]], np.int32)
    packed = dist.dcp_pack_candidates(logits, local_topk, 7, 0, 1)
    keys = packed[0].view(np.uint64)
    assert keys[6] == 0  # empty slot
    assert keys[0] > keys[3]  # equal scores: smaller id first
    assert keys[4] == keys[5] + 1  # -0 == +0, so only the id differs (4 < 5)
    assert keys[2] > keys[1] > 0  # NaN below -inf, above empty
    assert (packed[0, :6] & 0xFFFFFFFF == (~np.arange(6)) & 0xFFFFFFFF).all()


def test_bfloat16_logits_pack_their_fp32_bits(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    logits = rng.standard_normal((3, 40)).astype(ml_dtypes.bfloat16)
    local_topk = fi.topk_per_row(logits, 8, lengths=np.full(3, 40, np.int32))
    packed = dist.dcp_pack_candidates(logits, local_topk, 8, 1, 2)
    as_f32 = logits.astype(np.float32)
    f32_packed = dist.dcp_pack_candidates(as_f32, local_topk, 8, 1, 2)
    np.testing.assert_array_equal(packed, f32_packed)


def test_pack_rejects_indices_outside_the_row():
    logits = np.zeros((2, 10), np.float32)
    local_topk = np.full((2, 4), -1, np.int32)
    local_topk[1, 2] = 10
    with pytest.raises(ValueError, match=r"local_topk\[1, 2\]"):
        dist.dcp_pack_candidates(logits, local_topk, 4, 0, 2)
    with pytest.raises(ValueError, match="rank=2"):
        dist.dcp_pack_candidates(logits, np.full((2, 4), -1, np.int32), 4, 2, 2)
    with pytest.raises(ValueError, match="k=4096"):
        dist.dcp_merge_topk(np.zeros((2, 8192), np.int64), 4096, 2)
    with pytest.raises(ValueError, match="gathered"):
        dist.dcp_merge_topk(np.zeros((2, 7), np.int64), 4, 2)


def test_merge_with_a_caller_workspace(rng):
    expected, gathered = _simulate(rng, 3, 1, 32, 4, False)
    size = dist.dcp_merge_topk_cpu_workspace_size(3, 32, threads=2)
    workspace = np.empty(size, np.uint8)
    merged = dist.dcp_merge_topk(gathered.transpose(1, 0, 2), 32, 3, sorted=True,
                                 workspace=workspace, cpu_threads=2)
    np.testing.assert_array_equal(merged, expected)
    with pytest.raises(ValueError, match="workspace"):
        dist.dcp_merge_topk(gathered.transpose(1, 0, 2), 32, 3, workspace=workspace[:8],
                            cpu_threads=2)


def test_row_shard_plan_balances_and_is_never_worse_than_equal_split(rng):
    for tp in (2, 3, 4, 8):
        costs = np.concatenate([np.arange(1, n + 1) + c for n, c in
                                zip(rng.integers(1, 500, 20), rng.integers(0, 5000, 20))])
        sizes = fi.tp_row_shard_plan(costs.astype(np.int64), tp)
        assert sizes.dtype == np.int32 and sizes.sum() == len(costs) and (sizes >= 1).all()
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        worst = max(costs[a:b].sum() for a, b in zip(bounds[:-1], bounds[1:]))
        equal = np.array_split(costs, tp)
        assert worst <= max(part.sum() for part in equal)
        assert worst / (costs.sum() / tp) <= 1.02 + costs.max() * tp / costs.sum()
    np.testing.assert_array_equal(fi.tp_row_shard_plan(np.array([5, 7], np.int32), 4),
                                  [1, 1, 0, 0])


def test_row_shard_narrow_gives_each_chunk_row_to_one_rank():
    sizes = np.array([3, 2, 4], np.int32)  # 5 decode rows, then 9 prefill rows
    for chunk_start, chunk_end in ((5, 9), (9, 10), (10, 14)):
        ks = np.arange(chunk_start, chunk_end, dtype=np.int32) + 100
        ke = ks + 100
        owners = np.full(chunk_end - chunk_start, -1)
        for rank in range(3):
            window = fi.tp_row_shard_narrow(sizes, rank, 5, chunk_start, ks, ke)
            if window is None:
                continue
            start, end, wks, wke = window
            assert (owners[start - chunk_start:end - chunk_start] == -1).all()
            owners[start - chunk_start:end - chunk_start] = rank
            np.testing.assert_array_equal(wks, np.arange(start, end) + 100)
            np.testing.assert_array_equal(wke, np.arange(start, end) + 200)
        assert (owners >= 0).all()
    with pytest.raises(ValueError, match="rank=3"):
        fi.tp_row_shard_narrow(sizes, 3, 0, 0, ks, ke)


def test_nccl_query_is_consistent():
    assert isinstance(fi.has_nccl(), bool)
    assert (dist.nccl_version() > 0) == fi.has_nccl()


def test_nccl_entries_refuse_cleanly_without_nccl():
    if fi.has_nccl():
        pytest.skip(f"NCCL {dist.nccl_version()} is available")
    with pytest.raises(NotImplementedError, match="NCCL"):
        dist.nccl_unique_id()
    with pytest.raises(NotImplementedError, match="NCCL"):
        dist.NcclCommunicator.create(bytes(128), 0, 1)
    comm = dist.NcclCommunicator()
    assert comm.empty and comm.size == 0
    buffer = np.zeros((2, 4), np.int32)
    with pytest.raises(NotImplementedError, match="tp_allgather_rows"):
        dist.tp_allgather_rows(buffer, np.array([1, 1], np.int32), 0, comm)
    logits = np.zeros((2, 10), np.float32)
    topk = np.zeros((2, 4), np.int32)
    with pytest.raises(NotImplementedError, match="dcp_topk_allgather"):
        dist.dcp_topk_allgather(logits, topk, 4, comm, workspace=np.zeros(64, np.uint8))


def test_nccl_arguments_are_checked():
    if not fi.has_nccl():
        pytest.skip("built without NCCL or libnccl.so.2 not loadable")
    with pytest.raises(ValueError, match="unique_id has 3 bytes"):
        dist.NcclCommunicator.create(b"abc", 0, 1)
    with pytest.raises(ValueError, match="nccl_comm"):
        dist.NcclCommunicator.wrap(0)
    comm = dist.NcclCommunicator()
    with pytest.raises(ValueError, match="comm is empty"):
        dist.tp_allgather_rows(np.zeros((2, 4), np.int32), np.array([1, 1], np.int32), 0, comm)


@pytest.fixture
def one_rank(cuda_torch):
    if not fi.has_nccl():
        pytest.skip("built without NCCL or libnccl.so.2 not loadable")
    return dist.NcclCommunicator.create(dist.nccl_unique_id(), 0, 1)


def test_one_rank_dcp_topk_allgather_is_the_local_topk(one_rank, cuda_torch, rng):
    torch = cuda_torch
    assert (one_rank.rank, one_rank.size, one_rank.owned) == (0, 1, True)
    for k in (1, 512, 2048):
        rows, width = 5, 3000
        logits = torch.from_numpy(_special_logits(rng, rows * width).reshape(rows, width)).cuda()
        lens = torch.tensor([0, 1, k - 1, width, width // 2], dtype=torch.int32, device="cuda")
        local = fi.topk_per_row(logits, k, lengths=lens, sorted=True)
        got = dist.dcp_topk_allgather(logits, local, k, one_rank)
        torch.cuda.synchronize()
        assert torch.equal(got, local), f"k={k}"


def test_one_rank_tp_allgather_rows_keeps_the_buffer(one_rank, cuda_torch):
    torch = cuda_torch
    buffer = torch.arange(24, dtype=torch.int32, device="cuda").reshape(6, 4)
    before = buffer.clone()
    dist.tp_allgather_rows(buffer, np.array([3], np.int32), 2, one_rank)
    torch.cuda.synchronize()
    assert torch.equal(buffer, before)
