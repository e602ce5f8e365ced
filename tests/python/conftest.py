# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures: seeded random inputs (the seed is printed), optional PyTorch and CUDA."""

import os

import numpy as np
import pytest

import flashindexer as fi


@pytest.fixture
def rng(request):
    seed = int(os.environ.get("FLASHINDEXER_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"{request.node.name}: seed {seed} (rerun with FLASHINDEXER_SEED={seed})")
    return np.random.default_rng(seed)


def fp8_query(rng, *lead, heads=32, dim=128):
    """Random FP8 query values [*lead, heads, dim]."""
    rows = int(np.prod(lead)) * heads
    values = fi.quantize_k_fp8(rng.standard_normal((rows, dim), np.float32)).values
    return values.reshape(*lead, heads, dim)


def fp8_keys(rng, count, dim=128):
    return fi.quantize_k_fp8(rng.standard_normal((count, dim), np.float32) * 3)


def prefill_problem(rng, rows=12, keys=600, heads=32, dim=128):
    """A prefill chunk: q, keys, weights, ks, ke with varied (and some empty) ranges."""
    q = fp8_query(rng, rows, heads=heads, dim=dim)
    key_tensor = fp8_keys(rng, keys, dim)
    weights = rng.standard_normal((rows, heads), np.float32)
    ke = rng.integers(0, keys + 1, rows).astype(np.int32)
    ks = (ke * rng.uniform(0, 1, rows)).astype(np.int32)
    ks[0], ke[0] = 5, 5  # an empty row
    return q, key_tensor, weights, ks, ke


def decode_problem(rng, batch=3, next_n=2, heads=32, dim=128, page_size=16, fmt="fp8"):
    lengths = rng.integers(next_n, 150, batch)
    sequences = [rng.standard_normal((n, dim), np.float32) for n in lengths]
    paged = fi.build_k_cache(sequences, page_size=page_size, format=fmt, shuffle_pages=True,
                             seed=int(rng.integers(1 << 30)))
    weights = rng.standard_normal((batch * next_n, heads), np.float32)
    if fmt == "fp8":
        q = fp8_query(rng, batch, next_n, heads=heads, dim=dim)
    else:
        values, scales = fi.quantize_mxfp4(
            rng.standard_normal((batch * next_n, heads, dim), np.float32))
        q = (values.reshape(batch, next_n, heads, dim // 2),
             scales.reshape(batch, next_n, heads, dim // 32))
    return q, paged, weights


@pytest.fixture(scope="session")
def torch():
    return pytest.importorskip("torch")


@pytest.fixture(scope="session")
def cuda_torch(torch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    runs, why = fi.cuda_device_runs_kernels(torch.cuda.current_device(), reason=True)
    if not runs:
        pytest.skip(why)
    return torch
