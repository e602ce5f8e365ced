# SPDX-License-Identifier: Apache-2.0
"""The NumPy oracle (flashindexer.reference) against the C++ reference, on the same inputs.

The module's CPU ops are checked bit for bit against the C++ reference by the C++ suite, so
where both are exact (quantization, selection, the visible ranges) the oracle must give their
answer exactly; where the oracle evaluates in float64 (scores) it must lie within the derived
fp32 bound of theirs. A user who tests against the oracle then tests against the same contract.
"""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference

from conftest import decode_problem, prefill_problem


def _awkward_scores(rng, rows, width):
    """Scores with ties, both zeros, infinities and NaNs: every rule of the total order."""
    scores = rng.choice(np.float32([-1.5, -0.0, 0.0, 0.25, 2.0]), (rows, width))
    noise = rng.standard_normal((rows, width)).astype(np.float32)
    scores = np.where(rng.uniform(size=(rows, width)) < 0.5, noise, scores).astype(np.float32)
    specials = np.float32([np.nan, np.inf, -np.inf, -np.nan])
    mask = rng.uniform(size=(rows, width)) < 0.05
    scores[mask] = rng.choice(specials, int(mask.sum()))
    return scores


@pytest.mark.parametrize("scale", [1.0, 1e-3, 300.0])
def test_oracle_quantizers_match_the_cpu_ops_bit_for_bit(rng, scale):
    x = (rng.standard_normal((33, 128)) * scale).astype(np.float32)
    x[0] = 0.0  # an all-zero row
    values, scales = fi.quantize_k_fp8(x)
    oracle_values, oracle_scales = reference.quantize_k_fp8(x)
    np.testing.assert_array_equal(reference.numpy(values, raw_bytes=True),
                                  reference.numpy(oracle_values, raw_bytes=True))
    np.testing.assert_array_equal(scales, oracle_scales)
    values, scales = fi.quantize_mxfp4(x)
    oracle_values, oracle_scales = reference.quantize_mxfp4(x)
    np.testing.assert_array_equal(values, oracle_values)
    np.testing.assert_array_equal(scales, oracle_scales)


def test_oracle_selection_matches_the_cpu_op_on_every_range_form(rng):
    rows, width, k = 12, 300, 40
    scores = _awkward_scores(rng, rows, width)
    ke = rng.integers(0, width + 1, rows).astype(np.int32)
    ks = (ke * rng.uniform(0, 1, rows)).astype(np.int32)
    np.testing.assert_array_equal(fi.topk_per_row(scores, k, ks=ks, ke=ke, sorted=True),
                                  reference.topk_per_row(scores, k, ks=ks, ke=ke))
    # Decode: [B] lengths with next_n rows per request (row j sees len - next_n + j + 1 keys,
    # none when that is negative), [rows] lengths, and [B, next_n] lengths.
    next_n = 3
    lengths = rng.integers(0, width + 1, rows // next_n).astype(np.int32)
    lengths[0] = 1  # shorter than next_n: its first rows see nothing
    for form in (dict(lengths=lengths, next_n=next_n),
                 dict(lengths=rng.integers(0, width + 1, rows).astype(np.int32)),
                 dict(lengths=rng.integers(0, width + 1, (rows // next_n, next_n))
                      .astype(np.int32), next_n=next_n)):
        np.testing.assert_array_equal(fi.topk_per_row(scores, k, sorted=True, **form),
                                      reference.topk_per_row(scores, k, **form))


def test_oracle_scores_lie_within_the_fp32_bound_of_the_cpu_logits(rng):
    q, keys, weights, ks, ke = prefill_problem(rng)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    oracle = reference.mqa_logits(q, keys, weights, ks, ke)
    visible = np.isfinite(oracle)
    np.testing.assert_array_equal(np.isneginf(logits), ~visible)
    error = np.abs(logits[visible].astype(np.float64) - oracle[visible].astype(np.float64))
    assert (error <= reference.score_tolerance(q, keys, weights)[visible]).all()
    q, paged, weights = decode_problem(rng)
    logits = fi.paged_mqa_logits(q, paged.cache, weights, paged.seq_lens, paged.block_table)
    oracle = reference.paged_mqa_logits(q, paged.cache, weights, paged.seq_lens,
                                        paged.block_table)
    visible = np.isfinite(oracle)
    np.testing.assert_array_equal(np.isneginf(logits), ~visible)  # the same visible ranges
    error = np.abs(logits[visible].astype(np.float64) - oracle[visible].astype(np.float64))
    tolerance = reference.paged_score_tolerance(q, paged.cache, weights, paged.seq_lens,
                                                paged.block_table)
    assert (error <= tolerance[visible]).all()


def test_oracle_indexer_selects_as_the_cpu_indexer_on_the_same_logits(rng):
    k = 24
    q, keys, weights, ks, ke = prefill_problem(rng)
    logits = fi.mqa_logits(q, keys, weights, ks, ke)
    np.testing.assert_array_equal(
        fi.indexer_prefill(q, keys, weights, ks, ke, k, sorted=True),
        reference.topk_per_row(logits, k, ks=ks, ke=ke))
    q, paged, weights = decode_problem(rng)
    logits = fi.paged_mqa_logits(q, paged.cache, weights, paged.seq_lens, paged.block_table)
    next_n = q.shape[1]
    np.testing.assert_array_equal(
        fi.indexer_decode(q, paged.cache, weights, paged.seq_lens, paged.block_table, k,
                          sorted=True),
        reference.topk_per_row(logits, k, lengths=paged.seq_lens, next_n=next_n))
