# SPDX-License-Identifier: Apache-2.0
"""CUDA arrays of other frameworks through DLPack: CuPy (outputs allocated beside the inputs, on
CuPy's current stream) and JAX GPU arrays (inputs; outputs passed in). Skipped where the
framework, a GPU or the CUDA backend is missing."""

import numpy as np
import pytest

import flashindexer as fi


@pytest.fixture(scope="module")
def cuda_build():
    runs, why = fi.cuda_device_runs_kernels(0, reason=True)
    if not runs:
        pytest.skip(why)


def test_cupy_topk_and_logits_match_the_cpu(cuda_build, rng):
    cp = pytest.importorskip("cupy")
    logits = rng.standard_normal((3, 10_000)).astype(np.float32)
    lengths = np.array([10_000, 17, 0], dtype=np.int32)
    expected = fi.topk_per_row(logits, 64, lengths=lengths, sorted=True)
    with cp.cuda.Stream(non_blocking=True) as stream:
        top = fi.topk_per_row(cp.asarray(logits), 64, lengths=cp.asarray(lengths), sorted=True)
        stream.synchronize()
    assert isinstance(top, cp.ndarray)
    np.testing.assert_array_equal(cp.asnumpy(top), expected)


def test_jax_gpu_arrays_are_read_in_place(cuda_build, rng):
    jax = pytest.importorskip("jax")
    torch = pytest.importorskip("torch")
    try:
        gpu = jax.devices("gpu")[0]
    except RuntimeError:
        pytest.skip("JAX has no GPU backend here")
    logits = rng.standard_normal((4, 5000)).astype(np.float32)
    lengths = np.array([5000, 4999, 1, 0], dtype=np.int32)
    on_gpu = jax.device_put(logits, gpu).block_until_ready()
    lens_gpu = jax.device_put(lengths, gpu).block_until_ready()
    out = torch.full((4, 32), -7, dtype=torch.int32, device="cuda")
    fi.topk_per_row(on_gpu, 32, lengths=lens_gpu, sorted=True, out=out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(),
                                  fi.topk_per_row(logits, 32, lengths=lengths, sorted=True))
