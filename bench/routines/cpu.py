# SPDX-License-Identifier: Apache-2.0
"""The CPU backend (NumPy arrays in, the library's own threads) against NumPy computing the
same thing, and against the same-run CPU ceilings (bench/ceilings.py).

Cases: topk_per_row on N(0,1) fp32 logits (full rows), and for each scoring case the logits
op alone (mqa_logits / paged_mqa_logits) and the indexer (indexer_prefill / indexer_decode,
k best keys). The NumPy baseline is bench/cpu_baseline.py's: the dequantized FP8 operands,
matmul -> relu -> weighted head sum -> key scale -> mask (-> argpartition for the top-k), in
row chunks that keep the [rows, H, N] intermediate near 256 MiB. Every op is checked against
the baseline first (top-k: the same selected values). Wall time, median of N after a warm-up.
Rates: 2 * visible pairs * H * 128 FLOP / time against NumPy's fp32 matmul; top-k: logits
bytes / time against the streaming read.
"""
import numpy as np

from .. import cases
from ..cpu_baseline import chunk_rows, indexer_numpy
from ..report import Row, Table
from ..timing import cpu_median_ms

DIM, PAGE = 128, 64


def logits_numpy(q, keys, kscale, weights, ks, ke):
    """The scoring alone, as indexer_numpy computes it: [rows, N] fp32, -inf outside [ks, ke)."""
    rows, heads, _ = q.shape
    out = np.empty((rows, keys.shape[-2]), dtype=np.float32)
    columns = np.arange(keys.shape[-2])
    step = chunk_rows(heads, keys.shape[-2])
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        if keys.ndim == 3:  # decode: every row has its own keys
            scores = np.matmul(q[begin:end], keys[begin:end].transpose(0, 2, 1))
            scale = kscale[begin:end]
        else:
            scores = (q[begin:end].reshape(-1, DIM) @ keys.T).reshape(end - begin, heads, -1)
            scale = kscale
        logits = (np.maximum(scores, 0) * weights[begin:end, :, None]).sum(1) * scale
        visible = (columns >= ks[begin:end, None]) & (columns < ke[begin:end, None])
        logits[~visible] = -np.inf
        out[begin:end] = logits
    return out


def _quantized(fi, x):
    """FP8 values and scales of x [n, D], and the values dequantized with unit scales."""
    values, scales = fi.quantize_k_fp8(np.ascontiguousarray(x, dtype=np.float32))
    plain = fi.dequantize_k_fp8(values, np.ones(len(scales), dtype=np.float32))
    return values, np.asarray(scales), np.asarray(plain)


def _same_selection(logits, ours, theirs, k):
    """Both index sets [rows, k] select the same multiset of values in every row."""
    take = lambda idx: np.sort(np.take_along_axis(logits, idx.astype(np.int64), axis=1), axis=1)
    assert np.array_equal(take(ours), take(theirs)), "top-k selections differ from NumPy's"


def _scoring_inputs(fi, case, rng):
    rows, heads, n = case.rows, case.heads, case.keys
    q_values, q_scales, q_plain = _quantized(
        fi, rng.standard_normal((rows * heads, DIM), dtype=np.float32))
    weights = (rng.standard_normal((rows, heads)) * q_scales.reshape(rows, heads)).astype(
        np.float32)
    key_rows = rows * n if case.op == "decode" else n
    # A shared mean direction gives every row's scores a common offset, as real keys have.
    keys = (rng.standard_normal((key_rows, DIM), dtype=np.float32)
            + np.float32(0.5) * rng.standard_normal(DIM, dtype=np.float32))
    k_values, k_scales, k_plain = _quantized(fi, keys)
    return (q_values.reshape(rows, heads, DIM), q_plain.reshape(rows, heads, DIM), weights,
            keys, k_values, k_scales, k_plain)


def _bench_topk(ctx, fi, case, rng, table, ceilings):
    logits = rng.standard_normal((case.rows, case.keys), dtype=np.float32)
    lengths = np.full(case.rows, case.keys, dtype=np.int32)
    ours = lambda: fi.topk_per_row(logits, case.k, lengths=lengths)
    theirs = lambda: np.argpartition(-logits, case.k - 1, axis=1)[:, :case.k]
    _same_selection(logits, ours(), theirs(), case.k)
    repeats = ctx.iters(5)
    ms, base_ms = cpu_median_ms(ours, repeats), cpu_median_ms(theirs, repeats)
    gbs = logits.nbytes / ms / 1e6
    label = case.name.split(" ", 1)[1]
    table.add(Row(f"topk_per_row {label}", ms, base_ms, gbs, gbs / ceilings.read_gbs, None,
                  ctx.command("cpu", case.name), case.headline and f"{case.headline}"))


def _bench_scoring(ctx, fi, case, rng, table, ceilings):
    q_values, q_plain, weights, keys, k_values, k_scales, k_plain = _scoring_inputs(fi, case, rng)
    rows, n, k = case.rows, case.keys, case.k
    if case.op == "prefill":
        ks = np.zeros(rows, dtype=np.int32)
        ke = (np.arange(rows) + n - rows + 1).astype(np.int32)
        base_keys, base_scales = k_plain, k_scales
        logits_op = lambda: fi.mqa_logits(q_values, (k_values, k_scales), weights, ks, ke,
                                          clean=True)
        indexer_op = lambda: fi.indexer_prefill(q_values, (k_values, k_scales), weights, ks, ke, k)
        names = ("mqa_logits", "indexer_prefill")
    else:
        # One request per row (next_n 1), each with its own shuffled pages.
        sequences = [keys[b * n:(b + 1) * n] for b in range(rows)]
        paged = fi.build_k_cache(sequences, PAGE, "fp8", shuffle_pages=True, seed=1)
        q4 = q_values.reshape(rows, 1, case.heads, DIM)
        ks = np.zeros(rows, dtype=np.int32)
        ke = np.asarray(paged.seq_lens, dtype=np.int32)
        base_keys = k_plain.reshape(rows, n, DIM)
        base_scales = k_scales.reshape(rows, n)
        logits_op = lambda: fi.paged_mqa_logits(q4, paged.cache, weights, paged.seq_lens,
                                                paged.block_table, clean=True)
        indexer_op = lambda: fi.indexer_decode(q4, paged.cache, weights, paged.seq_lens,
                                               paged.block_table, k)
        names = ("paged_mqa_logits", "indexer_decode")
    base_logits = lambda: logits_numpy(q_plain, base_keys, base_scales, weights, ks, ke)
    decode = case.op == "decode"
    base_indexer = lambda: indexer_numpy(
        q_plain, base_keys if decode else base_keys[None], base_scales if decode
        else base_scales[None], weights, ks, ke, k, decode)
    expected = base_logits()
    got = np.asarray(logits_op())[:, :n]
    visible = np.isfinite(expected)
    scale = max(float(np.abs(expected[visible]).max()), 1e-30)
    assert np.allclose(got[visible], expected[visible], rtol=1e-3, atol=1e-4 * scale), \
        f"{case.name}: logits differ from NumPy's"
    repeats = ctx.iters(3)
    flop = 2 * int((ke.astype(np.int64) - ks).sum()) * case.heads * DIM
    for name, ours, theirs in ((names[0], logits_op, base_logits),
                               (names[1], indexer_op, base_indexer)):
        ms, base_ms = cpu_median_ms(ours, repeats), cpu_median_ms(theirs, repeats)
        gflops = flop / ms / 1e6
        headline = case.headline if name.startswith("indexer") else None
        table.add(Row(f"{name} {case.name.split(' ', 1)[1]}", ms, base_ms, gflops,
                      gflops / ceilings.matmul_gflops, None, ctx.command("cpu", case.name),
                      headline))


def run(ctx):
    import flashindexer as fi

    ceilings = ctx.cpu_ceilings()
    selection = [c for c in cases.cpu(ctx.preset) if cases.selected(ctx.only, c.name)]
    topk = Table("CPU top-k (topk_per_row)", "ms", "NumPy argpartition", "GB/s",
                 "NumPy read", command=ctx.command("cpu", "topk"),
                 notes="NumPy arrays, the library's default threads, N(0,1) fp32 full rows; "
                       "rate: logits bytes read / time.")
    scoring = Table("CPU scoring and indexer", "ms", "NumPy", "GFLOP/s", "NumPy fp32 matmul",
                    command=ctx.command("cpu"),
                    notes="NumPy arrays, the library's default threads; rate: 2 * visible "
                          "pairs * H * 128 FLOP / time, against the rate NumPy's fp32 matmul "
                          "reaches (not the FMA peak). The indexer's baseline adds "
                          "argpartition to the NumPy scoring.")
    rng = np.random.default_rng(2026)
    for table, kind in ((topk, ("topk",)), (scoring, ("prefill", "decode"))):
        ctx.start(table)
        for case in selection:
            if case.op not in kind:
                continue
            if case.op == "topk":
                _bench_topk(ctx, fi, case, rng, table, ceilings)
            else:
                _bench_scoring(ctx, fi, case, rng, table, ceilings)
    return [table for table in (topk, scoring) if table.rows]
