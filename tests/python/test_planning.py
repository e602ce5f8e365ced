# SPDX-License-Identifier: Apache-2.0
"""Step planning (flashindexer.planning) against plain transcriptions of the specification."""

import numpy as np
import pytest

import flashindexer as fi


def split_chunks(N_real, M, workspace_size, max_logits_bytes, min_split_seq_len=0):
    """split_indexer_prefill_chunks as the specification writes it (clamp, then drop groups
    whose real key total is 0)."""
    N = [max(n, min_split_seq_len) for n in N_real]
    max_logits_elems = max_logits_bytes // 4
    out, end = [], 0
    while end < len(N):
        start, m, n = end, 0, 0
        while end < len(N) and n + N[end] <= workspace_size and \
                (m + M[end]) * (n + N[end]) <= max_logits_elems:
            m += M[end]
            n += N[end]
            end += 1
        if end == start:
            m, n = M[start], N[start]
            end += 1
        max_q = max(1, max_logits_elems // n) if n > 0 else max(1, m)
        n_real = sum(N_real[start:end])
        if n_real == 0:
            continue
        for q_off in range(0, m, max_q):
            out.append((start, end, q_off, min(q_off + max_q, m), n_real))
    return out


def local_len(L, r, N, I):
    base = (L // I // N) * I
    return base + min(max(L - base * N - r * I, 0), I)


def test_plan_prefill_chunks_matches_transcription(rng):
    for _ in range(2000):
        workspace = int(rng.integers(1, 300))
        logits_bytes = int(rng.integers(4, 4 * 20000))
        requests = int(rng.integers(0, 30))
        keys = [int(v) for v in rng.choice([0, 1, 3, workspace, workspace + 1,
                                            int(rng.integers(0, 3 * workspace + 1))], requests)]
        queries = [int(v) for v in rng.integers(0, 300, requests)]
        clamp = int(rng.integers(0, 50)) if rng.random() < 0.3 else 0
        chunks = fi.plan_prefill_chunks(np.array(keys, np.int32), queries, workspace,
                                        logits_bytes, clamp)
        got = [(c.request_begin, c.request_end, c.query_begin, c.query_end, c.num_keys)
               for c in chunks]
        assert got == split_chunks(keys, queries, workspace, logits_bytes, clamp)
        for c in chunks:
            assert c.gathers_keys == (c.query_begin == 0)
            assert c.token_begin == sum(queries[:c.request_begin]) + c.query_begin
            assert c.token_end - c.token_begin == c.query_end - c.query_begin


def test_plan_prefill_chunks_edges():
    assert fi.plan_prefill_chunks([], [], 10, 400) == []
    assert len(fi.plan_prefill_chunks([4, 4], [1, 1], 8, 1 << 20)) == 1
    assert len(fi.plan_prefill_chunks([4, 5], [1, 1], 8, 1 << 20)) == 2
    sub = fi.plan_prefill_chunks([10], [7], 100, 4 * 30)
    assert [(c.query_begin, c.query_end, c.gathers_keys) for c in sub] == \
        [(0, 3, True), (3, 6, False), (6, 7, False)]


@pytest.mark.parametrize("args, name", [
    (([-1], [1], 10, 400), "key_lens"),
    (([1], [-1], 10, 400), "query_lens"),
    (([1], [1, 2], 10, 400), "query_lens"),
    (([1], [1], 0, 400), "workspace_keys"),
    (([1], [1], 10, 0), "max_logits_bytes"),
])
def test_plan_prefill_chunks_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        fi.plan_prefill_chunks(*args)


def test_prefill_row_bounds_match_transcription(rng):
    for _ in range(500):
        R = int(rng.choice([1, 2, 4]))
        ranks, interleave = (int(rng.integers(1, 4)), int(rng.integers(1, 3))) \
            if rng.random() < 0.5 else (1, 1)
        rank = int(rng.integers(0, ranks))
        requests = int(rng.integers(1, 8))
        seq = [int(v) for v in rng.integers(0, 200, requests)]
        qry = [int(rng.integers(0, s + 1)) for s in seq]
        chunks = fi.plan_prefill_chunks([s // R for s in seq], qry, int(rng.integers(1, 200)),
                                        int(rng.integers(4, 16000)))
        for c in chunks:
            ks, ke, t2s = fi.prefill_row_bounds(c, seq, qry, R, dcp_ranks=ranks,
                                                dcp_interleave=interleave, dcp_rank=rank)
            cu, want_t2s = [0], []
            for r in range(c.request_begin, c.request_end):
                local = local_len(seq[r] // R, rank, ranks, interleave)
                want_t2s += [r - c.request_begin] * local
                cu.append(cu[-1] + local)
            want_ks, want_ke, row = [], [], 0
            for r in range(c.request_begin, c.request_end):
                for i in range(qry[r]):
                    if c.query_begin <= row < c.query_end:
                        p = seq[r] - qry[r] + i
                        want_ks.append(cu[r - c.request_begin])
                        want_ke.append(cu[r - c.request_begin] +
                                       local_len((p + 1) // R, rank, ranks, interleave))
                    row += 1
            assert ks.dtype == np.int32 and ke.dtype == np.int32 and t2s.dtype == np.int32
            assert ks.tolist() == want_ks and ke.tolist() == want_ke
            assert t2s.tolist() == want_t2s


def test_decode_layouts(rng):
    for _ in range(300):
        next_n = int(rng.integers(1, 5))
        R = int(rng.choice([1, 4]))
        B = int(rng.integers(0, 10))
        d = [int(v) for v in rng.integers(1, next_n + 1, B)]
        L = [int(rng.integers(x, 3000)) for x in d]
        lens, owner = fi.decode_flat_lens(L, d, next_n, R, rows=sum(d) + 2)
        want = [((L[b] - d[b]) + i + 1) // R for b in range(B) for i in range(d[b])] + [0, 0]
        assert lens.tolist() == want
        assert owner.tolist() == [b for b in range(B) for _ in range(d[b])] + [B, B + 1]
        native = fi.decode_native_lens(L, next_n, R)
        assert native.shape == (B, next_n)
        assert native.tolist() == [[max(0, L[b] - next_n + j + 1) // R for j in range(next_n)]
                                   for b in range(B)]
        packed_row, token_of = fi.decode_pack_map(d)
        flat = rng.standard_normal((sum(d), 5)).astype(np.float32)
        packed = np.where((token_of >= 0)[:, None], flat[np.maximum(token_of, 0)], -np.inf)
        np.testing.assert_array_equal(packed[packed_row], flat)


def test_decode_row_ranges():
    assert fi.decode_row_ranges(100, 10, 2000) == [(0, 100)]
    assert fi.decode_row_ranges(100, 10, 1999) == [(0, 64), (64, 100)]
    assert fi.decode_row_ranges(5, 10, 0) == [(0, 5)]
    with pytest.raises(ValueError, match="budget must be nonnegative"):
        fi.decode_row_ranges(10, 10, -1)
    with pytest.raises(ValueError, match="at least 16 bf16 rows"):
        fi.decode_row_ranges(100, 10, 319)


def _random_table(rng, rows, cols, run):
    """Distinct page ids in aligned runs of `run` consecutive ids."""
    groups = rng.permutation(rows * -(-cols // run) + 3)
    ids = (groups[:, None] * run + np.arange(run)).reshape(-1)
    return ids[:rows * -(-cols // run) * run].reshape(rows, -1)[:, :cols].astype(np.int32)


def test_reslice_block_table_splits_and_merges_like_the_formulas(rng):
    for _ in range(200):
        rows, cols = int(rng.integers(1, 6)), int(rng.integers(1, 12))
        f = int(rng.choice([1, 2, 4]))
        # Splitting: allocation pages of 4 x 64 keys, kernel pages of 64.
        table = _random_table(rng, rows, cols, 1)
        split = fi.reslice_block_table(table, 64 * f, 64)
        j = np.arange(cols * f)
        np.testing.assert_array_equal(split, table[:, j // f] * f + j % f)
        # Merging: vLLM's block_table[:, ::f] // f.
        runs = _random_table(rng, rows, cols, f)
        np.testing.assert_array_equal(fi.reslice_block_table(runs, 16, 16 * f),
                                      runs[:, ::f] // f)
        # Every key lands in the same slot through either table.
        key_lens = rng.integers(0, cols * 16 + 1, rows)
        merged = fi.reslice_block_table(runs, 16, 16 * f, key_lens=key_lens)
        for r in range(rows):
            s = np.arange(key_lens[r])
            np.testing.assert_array_equal(merged[r, s // (16 * f)] * 16 * f + s % (16 * f),
                                          runs[r, s // 16] * 16 + s % 16)
            used = -(-int(key_lens[r]) // (16 * f))
            assert (merged[r, used:] == -1).all()


def test_reslice_block_table_rejects_bad_input():
    with pytest.raises(ValueError, match="kernel_page_size=40"):
        fi.reslice_block_table([[0, 1]], 64, 40)
    with pytest.raises(ValueError, match=r"block_table\[0, 1\]=7"):
        fi.reslice_block_table([[4, 7, 6, 5]], 16, 64)  # not one aligned run
    with pytest.raises(ValueError, match=r"block_table\[0, 0\]=-1"):
        fi.reslice_block_table([[-1]], 64, 32)
    with pytest.raises(ValueError, match="key_lens entry 0"):
        fi.reslice_block_table([[3]], 64, 32, key_lens=[65])
    np.testing.assert_array_equal(fi.reslice_block_table([[3, -1]], 64, 32, key_lens=[40]),
                                  [[6, 7, -1, -1]])


def _decode_batch(rng, requests, next_n):
    d = rng.integers(1, next_n + 1, requests)
    L = rng.integers(d, 5000)
    return L, d


def test_decode_length_tensor_ops_equal_the_host_planner_on_cpu(rng):
    for _ in range(100):
        next_n = int(rng.integers(1, 5))
        L, d = _decode_batch(rng, int(rng.integers(0, 30)), next_n)
        R = int(rng.choice([1, 4]))
        ranks = int(rng.choice([1, 2, 3]))
        dcp = dict(dcp_ranks=ranks, dcp_interleave=int(rng.integers(1, 3)),
                   dcp_rank=int(rng.integers(0, ranks)))
        dtype = rng.choice([np.int32, np.int64])
        rows = int(d.sum()) + int(rng.integers(0, 4))
        want_lens, want_requests = fi.decode_flat_lens(L, d, next_n, R, rows=rows, **dcp)
        lens, requests = fi.planning.decode_flat_lens_tensors(L.astype(dtype), d.astype(dtype),
                                                              next_n, R, rows=rows, **dcp)
        np.testing.assert_array_equal(lens, want_lens)
        np.testing.assert_array_equal(requests, want_requests)
        native = fi.planning.decode_native_lens_tensors(L.astype(dtype), next_n, R, **dcp)
        np.testing.assert_array_equal(native, fi.decode_native_lens(L, next_n, R, **dcp))


def test_decode_length_tensor_ops_check_cpu_lengths():
    with pytest.raises(ValueError, match="query_lens entry 0"):
        fi.planning.decode_flat_lens_tensors(np.array([5], np.int32), np.array([3], np.int32), 2)
    with pytest.raises(TypeError, match="row_lens"):
        fi.planning.decode_flat_lens_tensors(np.array([5], np.int32), np.array([1], np.int32), 1,
                                             row_lens=np.zeros(1, np.int64))


def test_decode_length_tensor_ops_on_cuda_replay_in_a_graph(cuda_torch, rng):
    torch = cuda_torch
    next_n, R = 2, 4
    L, d = _decode_batch(rng, 600, next_n)
    seq = torch.tensor(L, dtype=torch.int32, device="cuda")
    query = torch.tensor(d, dtype=torch.int32, device="cuda")
    lens, requests = fi.planning.decode_flat_lens_tensors(seq, query, next_n, R)
    native = fi.planning.decode_native_lens_tensors(seq, next_n, R)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fi.planning.decode_flat_lens_tensors(seq, query, next_n, R, row_lens=lens,
                                             row_to_request=requests)
        fi.planning.decode_native_lens_tensors(seq, next_n, R, out=native)
    for _ in range(3):  # the next steps: new lengths written on the device, then a replay
        L, d = L + d, rng.integers(1, next_n + 1, len(L))
        seq.copy_(torch.tensor(L, dtype=torch.int32))
        query.copy_(torch.tensor(d, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want_lens, want_requests = fi.decode_flat_lens(L, d, next_n, R, rows=len(L) * next_n)
        np.testing.assert_array_equal(lens.cpu().numpy(), want_lens)
        np.testing.assert_array_equal(requests.cpu().numpy(), want_requests)
        np.testing.assert_array_equal(native.cpu().numpy(), fi.decode_native_lens(L, next_n, R))


def _prefill_batch(rng, requests, max_len):
    seq = rng.integers(0, max_len + 1, requests)
    partial = rng.integers(0, max_len + 1, requests) % (seq + 1)
    query = np.where(rng.random(requests) < 0.3, seq, partial)
    return seq, query


def test_prefill_row_bounds_tensors_on_cpu_are_prefill_row_bounds(rng):
    for _ in range(200):
        seq, query = _prefill_batch(rng, int(rng.integers(1, 12)), 300)
        R = int(rng.choice([1, 2, 4]))
        ranks = int(rng.integers(1, 4))
        dcp = dict(dcp_ranks=ranks, dcp_interleave=int(rng.integers(1, 3)),
                   dcp_rank=int(rng.integers(0, ranks)))
        dtype = rng.choice([np.int32, np.int64])
        for chunk in fi.planning.plan_prefill_chunks(seq // R, query, 200, 4 * 4000):
            want = fi.planning.prefill_row_bounds(chunk, seq, query, R, **dcp)
            ks, ke, tokens = fi.planning.prefill_row_bounds_tensors(
                chunk, seq.astype(dtype), query.astype(dtype), R, with_token_to_seq=True, **dcp)
            for got, expected in zip((ks, ke, tokens), want):
                np.testing.assert_array_equal(got, expected)
            assert fi.planning.prefill_row_bounds_tensors(chunk, seq, query, R, **dcp)[2] is None


def test_prefill_row_bounds_tensors_check_cpu_lengths():
    chunk = fi.planning.PrefillChunk(0, 1, 0, 2, 0, 2, 8, True)
    with pytest.raises(ValueError, match="query_lens entry 0"):
        fi.planning.prefill_row_bounds_tensors(chunk, np.array([8]), np.array([9]))
    with pytest.raises(ValueError, match="num_keys"):
        fi.planning.prefill_row_bounds_tensors(chunk._replace(num_keys=7), np.array([8]),
                                               np.array([2]))
    with pytest.raises(TypeError, match="ks"):
        fi.planning.prefill_row_bounds_tensors(chunk, np.array([8]), np.array([2]),
                                               ks=np.zeros(2, np.int64))


def test_prefill_row_bounds_tensors_on_cuda_equal_the_host_op_and_replay(cuda_torch, rng):
    torch = cuda_torch
    seq, query = _prefill_batch(rng, 300, 2000)
    R = 2
    chunks = fi.planning.plan_prefill_chunks(seq // R, query, 60000, 4 * 60000 * 3000)
    device_seq = torch.tensor(seq, dtype=torch.int64, device="cuda")
    device_query = torch.tensor(query, dtype=torch.int32, device="cuda")
    for chunk in chunks:
        want = fi.planning.prefill_row_bounds(chunk, seq, query, R)
        got = fi.planning.prefill_row_bounds_tensors(chunk, device_seq, device_query, R,
                                                     with_token_to_seq=True)
        assert all(t.device.type == "cuda" and t.dtype == torch.int32 for t in got)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g.cpu().numpy(), w)
    # One chunk captured; each replay reads the lengths the device holds (the contexts grown).
    chunk = chunks[0]
    ks, ke, _ = fi.planning.prefill_row_bounds_tensors(chunk, device_seq, device_query, R)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fi.planning.prefill_row_bounds_tensors(chunk, device_seq, device_query, R, ks=ks, ke=ke)
    for _ in range(3):
        seq = seq + rng.integers(0, 500, len(seq))
        device_seq.copy_(torch.tensor(seq, dtype=torch.int64))
        graph.replay()
        torch.cuda.synchronize()
        keys = seq[chunk.request_begin:chunk.request_end] // R
        grown = chunk._replace(num_keys=int(keys.sum()))
        want_ks, want_ke, _ = fi.planning.prefill_row_bounds(grown, seq, query, R)
        np.testing.assert_array_equal(ks.cpu().numpy(), want_ks)
        np.testing.assert_array_equal(ke.cpu().numpy(), want_ke)


def test_prefill_step_row_bounds_are_every_chunks_bounds(rng):
    seq = rng.integers(1, 3000, 20)
    query = np.minimum(seq, rng.integers(1, 400, 20))
    chunks = fi.planning.plan_prefill_chunks(seq, query, 5000, 4 * 2000 * 300)
    ks, ke, offsets = fi.planning.prefill_step_row_bounds(chunks, seq, query)
    assert len(offsets) == len(chunks) + 1
    for c, chunk in enumerate(chunks):
        one_ks, one_ke, _ = fi.planning.prefill_row_bounds(chunk, seq, query)
        np.testing.assert_array_equal(ks[offsets[c]:offsets[c + 1]], one_ks)
        np.testing.assert_array_equal(ke[offsets[c]:offsets[c + 1]], one_ke)


def test_prefill_step_row_bounds_from_the_chunk_array_into_staging_buffers(rng):
    seq = rng.integers(1, 3000, 20)
    query = np.minimum(seq, rng.integers(1, 400, 20))
    chunks = fi.planning.plan_prefill_chunks(seq, query, 5000, 4 * 2000 * 300)
    array = fi.planning.plan_prefill_chunks(seq, query, 5000, 4 * 2000 * 300, as_array=True)
    assert array.dtype == np.int64 and array.shape == (len(chunks), 8)
    assert [tuple(c) for c in array.tolist()] == [tuple(int(v) for v in c) for c in chunks]
    want_ks, want_ke, want_offsets = fi.planning.prefill_step_row_bounds(chunks, seq, query)
    rows = int(want_offsets[-1])
    staging = (np.full(rows + 7, -5, np.int32), np.full(rows + 7, -5, np.int32))
    ks, ke, offsets = fi.planning.prefill_step_row_bounds(array, seq, query, out=staging)
    np.testing.assert_array_equal(offsets, want_offsets)
    np.testing.assert_array_equal(ks, want_ks)
    np.testing.assert_array_equal(ke, want_ke)
    assert np.shares_memory(ks, staging[0]) and np.shares_memory(ke, staging[1])
    assert (staging[0][rows:] == -5).all() and (staging[1][rows:] == -5).all()
    with pytest.raises(ValueError, match="out ke has"):
        fi.planning.prefill_step_row_bounds(array, seq, query,
                                            out=(staging[0], np.empty(rows - 1, np.int32)))
    with pytest.raises(TypeError, match="out ks must be"):
        fi.planning.prefill_step_row_bounds(array, seq, query,
                                            out=(np.empty(rows, np.int64), staging[1]))
    with pytest.raises(TypeError, match="out ks must be"):
        fi.planning.prefill_step_row_bounds(array, seq, query,
                                            out=(np.empty(2 * rows, np.int32)[::2], staging[1]))


def _random_step(rng):
    """Lengths and options of one step: no prefill, all prefill or a mix; queries empty, whole or
    partial; some requests over the workspace alone; compression, DCP, padded and chunked decode
    rows at times."""
    R = int(rng.choice([1, 1, 2, 4, 128]))
    ranks = int(rng.integers(2, 4)) if rng.random() < 0.4 else 1
    options = dict(compress_ratio=R, dcp_ranks=ranks, dcp_interleave=int(rng.integers(1, 3)),
                   dcp_rank=int(rng.integers(0, ranks)))
    workspace = int(rng.integers(1, 400))
    budget = dict(workspace_keys=workspace, max_logits_bytes=int(rng.integers(4, 4 * 30000)),
                  min_split_key_len=int(rng.integers(0, 60)) if rng.random() < 0.2 else 0)
    prefills = 0 if rng.random() < 0.2 else int(rng.integers(1, 12))
    decodes = 0 if rng.random() < 0.2 else int(rng.integers(1, 20))
    keys = rng.choice([0, 1, workspace, workspace + 1, int(rng.integers(0, 3 * workspace + 1))],
                      prefills)
    seq = keys * R + rng.integers(0, R, prefills)
    kind = rng.integers(0, 3, prefills)
    query = np.where(kind == 0, 0, np.where(kind == 1, seq,
                                             rng.integers(0, np.minimum(seq, 600) + 1)))
    next_n = int(rng.integers(1, 5))
    d = rng.integers(1, next_n + 1, decodes)
    L = rng.integers(d, 5000)
    decode = dict(next_n=next_n,
                  decode_rows=int(d.sum()) + int(rng.integers(1, 5)) if rng.random() < 0.3
                  else None,
                  decode_width=int(rng.integers(0, 6000)) if rng.random() < 0.3 else None,
                  decode_logits_bytes=0 if rng.random() < 0.4
                  else int(rng.integers(0, 32 * 5000 * 4)))
    return seq.astype(np.int64), query.astype(np.int64), L, d, budget, decode, options


def _separately(seq, query, L, d, budget, decode, options):
    """The step through the separate calls an engine made before plan_step."""
    chunks = fi.planning.plan_prefill_chunks(seq // options["compress_ratio"], query,
                                             as_array=True, **budget)
    ks, ke, offsets = fi.planning.prefill_step_row_bounds(chunks, seq, query, **options)
    row_lens, row_to_request = fi.planning.decode_flat_lens(L, d, decode["next_n"],
                                                            rows=decode["decode_rows"], **options)
    width = decode["decode_width"]
    if width is None:  # the longest row, read off the rows
        width = int(row_lens.max()) if row_lens.size else 0
    ranges = fi.planning.decode_row_ranges(len(row_lens), width, decode["decode_logits_bytes"])
    return fi.planning.StepPlan(chunks, ks, ke, offsets, row_lens, row_to_request, ranges)


def test_plan_step_equals_the_separate_calls(rng):
    planned = rejected = 0
    for trial in range(1500):
        seq, query, L, d, budget, decode, options = _random_step(rng)
        try:
            want = _separately(seq, query, L, d, budget, decode, options)
        except ValueError:
            rejected += 1
            with pytest.raises(ValueError, match="plan_step"):
                fi.planning.plan_step(seq, query, L, d, **budget, **decode, **options)
            continue
        planned += 1
        # The lengths as an engine holds them (int64 arrays), as int32 arrays and as lists; the
        # row bounds into fresh arrays or into staging buffers with room to spare.
        form = trial % 3
        args = [seq, query, L, d] if form == 0 else \
            [v.astype(np.int32) for v in (seq, query, L, d)] if form == 1 else \
            [v.tolist() for v in (seq, query, L, d)]
        spare = int(rng.integers(0, 4))
        staging = (np.full(int(query.sum()) + spare, -7, np.int32),
                   np.full(int(query.sum()) + spare, -7, np.int32)) if trial % 2 else None
        # The package's top level exports the planning module's plan_step.
        got = fi.plan_step(*args, **budget, **decode, **options, out=staging)
        assert isinstance(got, fi.StepPlan)
        for name in ("chunks", "ks", "ke", "offsets", "row_lens", "row_to_request"):
            a, b = getattr(got, name), getattr(want, name)
            assert a.dtype == b.dtype and a.shape == b.shape, (trial, name)
            np.testing.assert_array_equal(a, b, err_msg=f"trial {trial}: {name}")
        assert got.ranges == want.ranges, trial
        if staging is not None:
            rows = len(got.ks)
            assert got.ks.base is staging[0] and got.ke.base is staging[1]
            assert (staging[0][rows:] == -7).all() and (staging[1][rows:] == -7).all()
    assert planned > 500 and rejected > 0


def test_plan_step_without_row_bounds_plans_the_same_step(rng):
    for _ in range(300):
        seq, query, L, d, budget, decode, options = _random_step(rng)
        try:
            want = fi.plan_step(seq, query, L, d, **budget, **decode, **options)
        except ValueError:
            continue
        got = fi.plan_step(seq, query, L, d, **budget, **decode, **options, row_bounds=False)
        assert len(got.ks) == len(got.ke) == 0
        for name in ("chunks", "offsets", "row_lens", "row_to_request"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
        assert got.ranges == want.ranges
    with pytest.raises(ValueError, match="row_bounds=False"):
        fi.plan_step(seq, query, L, d, **budget, **decode, **options, row_bounds=False,
                     out=(np.empty(8, np.int32), np.empty(8, np.int32)))


def test_plan_step_rejects_bad_input_naming_the_argument():
    good = dict(prefill_seq_lens=[8, 6], prefill_query_lens=[2, 3], decode_seq_lens=[10, 4],
                decode_query_lens=[1, 2], workspace_keys=100, max_logits_bytes=1 << 20, next_n=2)
    plan = fi.planning.plan_step(**good)
    assert plan.ks.tolist() == [0, 0, 8, 8, 8] and plan.ke.tolist() == [7, 8, 12, 13, 14]
    assert plan.row_lens.tolist() == [10, 3, 4] and plan.row_to_request.tolist() == [0, 1, 1]
    assert plan.ranges == [(0, 3)]
    for change, name in [
        (dict(prefill_query_lens=[2, 7]), "prefill_query_lens entry 1"),
        (dict(prefill_seq_lens=[-1, 6]), "prefill_seq_lens entry 0"),
        (dict(prefill_query_lens=[2]), "prefill_query_lens has 1 entries"),
        (dict(decode_query_lens=[0, 2]), "decode_query_lens entry 0"),
        (dict(next_n=1), "next_n=1"),
        (dict(workspace_keys=0), "workspace_keys=0"),
        (dict(max_logits_bytes=3), "max_logits_bytes=3"),
        (dict(compress_ratio=0), "compress_ratio=0"),
        (dict(dcp_ranks=2, dcp_rank=2), "dcp_rank=2"),
        (dict(decode_width=-2), "decode_width=-2"),
        (dict(decode_logits_bytes=-1), "budget must be nonnegative"),
        (dict(decode_rows=2), "decode_row_lens has 2 entries"),
        (dict(decode_rows=-1), "decode_rows=-1"),
        (dict(decode_seq_lens=[1000] * 20, decode_query_lens=[1] * 20,
              decode_logits_bytes=16 * 1000 * 2 - 1), "at least 16 bf16 rows"),
    ]:
        with pytest.raises(ValueError, match=name):
            fi.planning.plan_step(**{**good, **change})
    staging = (np.full(4, -7, np.int32), np.full(5, -7, np.int32))
    with pytest.raises(ValueError, match="ks has 4 entries"):
        fi.planning.plan_step(**good, out=staging)
    assert (staging[0] == -7).all() and (staging[1] == -7).all()
    with pytest.raises(TypeError, match="out ks"):
        fi.planning.plan_step(**good, out=(np.empty(5, np.int64), np.empty(5, np.int32)))
    with pytest.raises(TypeError, match="out ke"):
        fi.planning.plan_step(**good, out=(np.empty(5, np.int32), np.empty(10, np.int32)[::2]))
