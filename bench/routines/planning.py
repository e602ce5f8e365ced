# SPDX-License-Identifier: Apache-2.0
"""The step's host planning for a 256-request batch (spec §6.2, §6.3, §7.1, §7.5), as an engine
plans one step before it launches anything: the prefill chunks under the K-workspace and logits
budgets, every chunk's row bounds (ks, ke; gather_k_workspace takes cu_seq_lens, so no per-key
token_to_seq), the decode rows' lengths and request map (flattened layout), and the decode row
ranges under a logits budget; from host-side lengths only.

Ours: flashindexer.planning.plan_step, the whole step in one call (C++ under the Python binding,
its binding cost included), as an engine makes it: the chunks come back as one array and the row
bounds are written into staging buffers kept from step to step (out=), so neither a Python object
per chunk nor fresh pages of a long step's bounds are timed. Peer: the same planning in plain
Python/NumPy, written from the spec's formulas (the form vLLM's indexer plans its steps in), on
the same lengths. Both are checked to give the same chunks, bounds and lengths before timing.
Times: median of --iters repeats of the whole step, on one CPU thread, in microseconds. The
'bounds on the device' row plans the step without its row bounds (plan_step(row_bounds=False)),
for an engine that builds them on the GPU; on a GPU run a second table times that build
(prefill_row_bounds_tensors, one call a chunk) against the same bounds in PyTorch ops.
"""
import time

import numpy as np

from .. import cases
from ..report import Row, Table

TITLE = "Host step planning (prefill chunks, row bounds, decode layouts)"
WORKSPACE_KEYS = 262144            # K-workspace budget of a chunk (keys)
LOGITS_BYTES = 512 * 1024 * 1024   # fp32 logits budget of a chunk
DECODE_LOGITS_BYTES = 256 * 1024 * 1024
NEXT_N = 1


def _batch(requests, prefill, seed):
    """`prefill` prefill requests (1-4096 new tokens over 1K-128K contexts) then decode ones."""
    rng = np.random.default_rng(seed)
    seq = rng.integers(1024, 131072, requests).astype(np.int64)
    query = np.ones(requests, np.int64)
    query[:prefill] = rng.integers(1, 4097, prefill)
    seq[:prefill] = np.maximum(seq[:prefill], query[:prefill])
    return seq, query, prefill


def _ours(fi, seq, query, prefill, staging):
    """The step's plan; staging None: without the row bounds (built on the device)."""
    return fi.planning.plan_step(seq[:prefill], query[:prefill], seq[prefill:], query[prefill:],
                                 workspace_keys=WORKSPACE_KEYS, max_logits_bytes=LOGITS_BYTES,
                                 next_n=NEXT_N, decode_logits_bytes=DECODE_LOGITS_BYTES,
                                 out=staging, row_bounds=staging is not None)


def _peer_chunks(key_lens, query_lens):
    """§6.2 in Python: greedy groups under both budgets, a group over the logits budget cut into
    query sub-chunks sharing one gather, a request over a budget alone, empty groups dropped."""
    chunks, n, i = [], len(key_lens), 0
    token = 0
    while i < n:
        keys, rows, j = 0, 0, i
        while j < n:
            k, q = int(key_lens[j]), int(query_lens[j])
            if j > i and (keys + k > WORKSPACE_KEYS or (rows + q) * (keys + k) * 4 > LOGITS_BYTES):
                break
            keys, rows, j = keys + k, rows + q, j + 1
        if keys > 0 and rows > 0:
            per = max(LOGITS_BYTES // (4 * keys), 1)
            for begin in range(0, rows, per):
                end = min(rows, begin + per)
                chunks.append((i, j, begin, end, token + begin, token + end, keys, begin == 0))
        token += rows
        i = j
    return chunks


def _peer(seq, query, prefill, with_bounds=True):
    key_lens, query_lens = seq[:prefill], query[:prefill]
    chunks = _peer_chunks(key_lens, query_lens)
    bounds = []
    for rb, re, qb, qe, _, _, _, _ in (chunks if with_bounds else ()):
        starts = np.concatenate([[0], np.cumsum(key_lens[rb:re])])[:-1]
        rows = np.concatenate([np.full(int(query_lens[r]), r - rb) for r in range(rb, re)])
        position = np.concatenate([np.arange(int(key_lens[r] - query_lens[r]), int(key_lens[r]))
                                   for r in range(rb, re)])
        request = rows[qb:qe]
        ks = starts[request].astype(np.int32)
        ke = (ks + position[qb:qe] + 1).astype(np.int32)
        bounds.append((ks, ke))
    decode_seq, decode_query = seq[prefill:], query[prefill:]
    to_request = np.repeat(np.arange(len(decode_seq), dtype=np.int32), decode_query)
    offset = np.concatenate([np.arange(int(q)) for q in decode_query])
    lens = (decode_seq[to_request] - decode_query[to_request] + offset + 1).astype(np.int32)
    return chunks, bounds, (lens, to_request), _peer_ranges(len(lens), int(decode_seq.max()))


def _peer_ranges(rows, width):
    """§7.5 in Python: one range when the bf16 logits fit, else units of 16 rows spread evenly
    over the fewest ranges the budget allows, the largest first."""
    if rows == 0 or rows * width * 2 <= DECODE_LOGITS_BYTES:
        return [(0, rows)]
    limit = DECODE_LOGITS_BYTES // (2 * width) // 16 * 16
    units = -(-rows // 16)
    count = -(-units // (limit // 16))
    base, extra = divmod(units, count)
    ranges, start = [], 0
    for i in range(count):
        end = min(rows, start + 16 * (base + (i < extra)))
        ranges.append((start, end))
        start = end
    return ranges


def _check(name, ours, peer):
    assert [tuple(c) for c in ours.chunks.tolist()] == \
        [tuple(int(v) for v in c) for c in peer[0]], f"{name}: chunks differ"
    assert len(ours.offsets) == len(peer[0]) + 1 and ours.offsets[0] == 0, \
        f"{name}: chunk row offsets differ"
    assert len(ours.ks) == len(ours.ke) == (ours.offsets[-1] if peer[1] else 0), \
        f"{name}: row bounds' size differs"
    for c, (want_ks, want_ke) in enumerate(peer[1]):
        part = slice(int(ours.offsets[c]), int(ours.offsets[c + 1]))
        assert np.array_equal(ours.ks[part], want_ks) and np.array_equal(ours.ke[part], want_ke), \
            f"{name}: row bounds of chunk {c} differ"
    for a, b in zip((ours.row_lens, ours.row_to_request), peer[2]):
        assert np.array_equal(a, b), f"{name}: decode lengths differ"
    assert ours.ranges == peer[3], f"{name}: decode row ranges differ"


def _median_us(fn, iters):
    fn()
    times = []
    for _ in range(iters):
        start = time.perf_counter_ns()
        fn()
        times.append(time.perf_counter_ns() - start)
    return float(np.median(times)) / 1e3


def run(ctx):
    import flashindexer as fi

    table = Table(TITLE, "us", "Python/NumPy (same planning)", "Mrows/s", None,
                  command=ctx.command("planning"),
                  notes=f"A step of 256 requests (next_n {NEXT_N} decode); budgets: "
                        f"{WORKSPACE_KEYS} workspace keys and {LOGITS_BYTES >> 20} MiB of fp32 "
                        f"logits a prefill chunk, {DECODE_LOGITS_BYTES >> 20} MiB of decode "
                        "logits. Rate: the step's query rows (prefill and decode) planned per "
                        "second. Ours plans as an engine would: the whole step in one call "
                        "(plan_step), the row bounds into staging buffers kept between steps; "
                        "the 'bounds on the device' row without them (plan_step(row_bounds="
                        "False)), for an engine that builds them on the GPU. Target: under "
                        "50 us.")
    ctx.start(table)
    steps = []
    for requests, prefill, bounds in ((256, 16, True), (256, 64, True), (256, 0, True),
                                      (256, 64, False)):
        name = f"{requests} requests, {prefill} prefill" + ("" if bounds else
                                                            ", bounds on the device")
        if not cases.selected(ctx.only, name):
            continue
        seq, query, prefill = _batch(requests, prefill, requests + prefill)
        # The row-bounds staging buffers an engine keeps from step to step (None: no bounds).
        staging = tuple(np.empty(int(query[:prefill].sum()), np.int32) for _ in range(2)) \
            if bounds else None
        ours = _ours(fi, seq, query, prefill, staging)
        _check(name, ours, _peer(seq, query, prefill, bounds))
        iters = ctx.iters(200)
        ours_us = _median_us(lambda: _ours(fi, seq, query, prefill, staging), iters)
        peer_us = _median_us(lambda: _peer(seq, query, prefill, bounds), iters)
        rows = int(query.sum())
        table.add(Row(name, ours_us, peer_us, rows / ours_us, None, None,
                      ctx.command("planning", name), None))
        if bounds and prefill:
            steps.append((name, seq[:prefill], query[:prefill], ours))
    tables = [table]
    if ctx.args.device == "cuda" and steps:
        tables.append(_device_bounds(ctx, fi, steps))
    return tables


def _torch_chunk_bounds(torch, seq, query, chunk, group_queries, ks, ke):
    """A chunk's ks / ke (R = 1, one rank) in PyTorch ops on the device: each row's request by
    repeat_interleave, its position and its request's first workspace key by prefix sums."""
    rb, re, qb, qe = (int(v) for v in chunk[:4])
    s, q = seq[rb:re], query[rb:re]
    first_key = torch.cumsum(s, 0) - s
    first_query = torch.cumsum(q, 0) - q
    request = torch.repeat_interleave(torch.arange(re - rb, device=s.device), q,
                                      output_size=group_queries)[qb:qe]
    g = torch.arange(qb, qe, device=s.device)
    start = first_key[request]
    ks.copy_(start)
    ke.copy_(start + s[request] - q[request] + (g - first_query[request]) + 1)


def _device_bounds(ctx, fi, steps):
    """Every chunk's row bounds of a step built on the GPU from device-side lengths: ours, one
    prefill_row_bounds_tensors call a chunk, against the same bounds in PyTorch ops, each
    checked against the host plan's bounds."""
    import torch

    from ..timing import graph_ms

    table = Table("GPU prefill row bounds (build_prefill_row_bounds on CUDA tensors)", "ms",
                  "PyTorch", "Mrows/s", None, command=ctx.command("planning"),
                  notes="The chunks of the host table's steps (planned with their bounds there), "
                        "every chunk's ks / ke from int64 device lengths, one call a chunk; "
                        "CUDA-graph replays of the whole step. With the bounds on the device the "
                        "host plans the step without them (the table's 'bounds on the device' "
                        "row) and copies no row to the GPU.")
    ctx.start(table)
    iters = ctx.iters(30)
    for name, seq, query, plan in steps:
        device_seq = torch.tensor(seq, dtype=torch.int64, device="cuda")
        device_query = torch.tensor(query, dtype=torch.int64, device="cuda")
        rows = int(plan.offsets[-1])
        ks, ke = (torch.empty(rows, dtype=torch.int32, device="cuda") for _ in range(2))
        peer_ks, peer_ke = (torch.empty(rows, dtype=torch.int64, device="cuda") for _ in range(2))
        parts = [(chunk, int(plan.offsets[c]), int(plan.offsets[c + 1]),
                  int(query[int(chunk[0]):int(chunk[1])].sum()))
                 for c, chunk in enumerate(plan.chunks)]

        def run_ours():
            for chunk, begin, end, _ in parts:
                fi.planning.prefill_row_bounds_tensors(chunk, device_seq, device_query,
                                                       ks=ks[begin:end], ke=ke[begin:end])

        def run_peer():
            for chunk, begin, end, group_queries in parts:
                _torch_chunk_bounds(torch, device_seq, device_query, chunk, group_queries,
                                    peer_ks[begin:end], peer_ke[begin:end])

        run_ours()
        run_peer()
        torch.cuda.synchronize()
        for got in (ks, peer_ks):
            assert np.array_equal(got.cpu().numpy(), plan.ks), f"{name}: ks differ"
        for got in (ke, peer_ke):
            assert np.array_equal(got.cpu().numpy(), plan.ke), f"{name}: ke differ"
        ms = graph_ms(run_ours, 1, iters)
        peer_ms = graph_ms(run_peer, 1, iters)
        case = f"{name}: {len(parts)} chunks, {rows} rows"
        table.add(Row(case, ms, peer_ms, rows / ms / 1e3, None, None,
                      ctx.command("planning", name), None))
    return table
