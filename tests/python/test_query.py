# SPDX-License-Identifier: Apache-2.0
"""Query quantization and RoPE: bit-exact with a NumPy transcription of spec §2.2 - §2.4; the
cache writer's fused key RoPE equals rotating first; CUDA equals CPU where a GPU is present."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference

ml_dtypes = pytest.importorskip("ml_dtypes")

ROPES = [None, ("neox", "first64"), ("neox", "last64"), ("interleaved", "first64"),
         ("interleaved", "last64")]


def cos_sin_cache(positions):
    angles = np.arange(positions)[:, None] * 10000.0 ** (-np.arange(32) / 32.0)
    return np.concatenate([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def rotate(x, style, dims, table, positions):
    """Spec §2.2 on [T, ..., D] float32 rows: fp32 products, bf16-rounded results."""
    x = np.array(x, dtype=np.float32, copy=True)
    offset = 0 if dims == "first64" else x.shape[-1] - 64
    if style == "neox":
        first, second = offset + np.arange(32), offset + 32 + np.arange(32)
    else:
        first, second = offset + 2 * np.arange(32), offset + 2 * np.arange(32) + 1
    rows = table[positions].reshape((x.shape[0],) + (1,) * (x.ndim - 2) + (64,))
    cos, sin = rows[..., :32], rows[..., 32:]
    x0, x1 = x[..., first], x[..., second]
    r0 = (x0 * cos).astype(np.float32) - (x1 * sin).astype(np.float32)
    r1 = (x1 * cos).astype(np.float32) + (x0 * sin).astype(np.float32)
    x[..., first] = r0.astype(ml_dtypes.bfloat16).astype(np.float32)
    x[..., second] = r1.astype(ml_dtypes.bfloat16).astype(np.float32)
    return x


def pow2_ceil(x):
    mantissa, exponent = np.frexp(x)
    return np.ldexp(1.0, np.where(mantissa == 0.5, exponent - 1, exponent)).astype(np.float32)


def query_problem(rng, tokens=9, heads=4, dim=128):
    q = (rng.standard_normal((tokens, heads, dim)) *
         2.0 ** rng.integers(-20, 20, (tokens, heads, 1))).astype(np.float32)
    q[0, 0] = 0  # an all-zero head takes eps
    q[1, 1, :3] = [448.0, -1e30, 1e-40]
    weights = rng.standard_normal((tokens, heads)).astype(np.float32)
    positions = rng.integers(0, 50, tokens).astype(np.int64)
    return q, weights, positions, cos_sin_cache(50)


@pytest.mark.parametrize("rope", ROPES)
@pytest.mark.parametrize("eps", [1e-10, 1e-4])
def test_fp8_query_matches_the_spec_transcription(rng, rope, eps):
    q, weights, positions, table = query_problem(rng)
    rope_arg = None if rope is None else fi.Rope(rope[0], rope[1], table, positions)
    values, weights_out = fi.quantize_query_fp8(q, weights, eps=eps, rope=rope_arg)
    x = q if rope is None else rotate(q, rope[0], rope[1], table, positions)
    sigma = pow2_ceil(np.maximum(np.abs(x).max(axis=-1), np.float32(eps)) / np.float32(448))
    np.testing.assert_array_equal(values.view(np.uint8),
                                  reference.encode_e4m3(x / sigma[..., None]))
    scale = np.float32(1.0 / np.sqrt(128.0 * q.shape[1]))
    np.testing.assert_array_equal(weights_out, (weights * sigma) * scale)


@pytest.mark.parametrize("rope", ROPES)
def test_mxfp4_query_is_the_mxfp4_quantizer_of_the_rotated_heads(rng, rope):
    q, weights, positions, table = query_problem(rng, dim=64)
    q = q.astype(ml_dtypes.bfloat16)
    rope_arg = None if rope is None else fi.Rope(rope[0], rope[1], table, positions)
    (values, scales), weights_out = fi.quantize_query_mxfp4(q, weights, weight_scale=0.5,
                                                            rope=rope_arg)
    x = q.astype(np.float32)
    if rope is not None:
        x = rotate(x, rope[0], rope[1], table, positions)
    expected_values, expected_scales = reference.quantize_mxfp4(x)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(weights_out, weights * np.float32(0.5))


def test_default_weight_scale_is_the_inverse_root_of_d_times_h():
    assert fi.default_query_weight_scale(128, 64) == np.float32(1 / np.sqrt(128 * 64))


def test_query_errors_name_the_argument(rng):
    q, weights, positions, table = query_problem(rng)
    with pytest.raises(TypeError):
        fi.quantize_query_fp8(q, weights)  # eps has no default
    with pytest.raises(ValueError, match="eps"):
        fi.quantize_query_fp8(q, weights, eps=0.0)
    with pytest.raises(ValueError, match="rope style"):
        fi.quantize_query_fp8(q, weights, eps=1e-10, rope=fi.Rope("gptj", "first64", table,
                                                                   positions))
    with pytest.raises(ValueError, match="rope.dims"):
        fi.quantize_query_fp8(q, weights, eps=1e-10, rope=fi.Rope("neox", "", table, positions))
    bad = positions.copy()
    bad[2] = 50
    with pytest.raises(ValueError, match=r"rope.positions\[2\]=50"):
        fi.quantize_query_fp8(q, weights, eps=1e-10, rope=fi.Rope("neox", "last64", table, bad))


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
@pytest.mark.parametrize("rope", ROPES[1:])
def test_insert_with_rope_equals_rotating_then_inserting(rng, fmt, rope):
    keys = rng.standard_normal((70, 128)).astype(np.float32)
    slots = rng.permutation(96)[:70].astype(np.int64)
    slots[5] = -1
    positions = rng.integers(0, 50, 70).astype(np.int64)
    table = cos_sin_cache(50)
    fused = fi.empty_k_cache(3, 32, 128, fmt)
    plain = fi.empty_k_cache(3, 32, 128, fmt)
    fused.data[:] = 0xCD
    plain.data[:] = 0xCD
    fi.insert_k_cache(fused, keys, slots, rope=fi.Rope(rope[0], rope[1], table, positions))
    fi.insert_k_cache(plain, rotate(keys, rope[0], rope[1], table, positions), slots)
    np.testing.assert_array_equal(fused.data, plain.data)


# ----------------------------------------------------------------------------------------------
# CUDA tensors (PyTorch), against the same call on the CPU


@pytest.mark.parametrize("rope", ROPES)
def test_cuda_query_quantizers_equal_the_cpu(rng, cuda_torch, rope):
    torch = cuda_torch
    q, weights, positions, table = query_problem(rng, tokens=300, heads=64)
    q_cpu = torch.from_numpy(q).to(torch.bfloat16)
    w_cpu = torch.from_numpy(weights)
    table_cpu, positions_cpu = torch.from_numpy(table), torch.from_numpy(positions)

    def rope_on(device):
        if rope is None:
            return None
        return fi.Rope(rope[0], rope[1], table_cpu.to(device), positions_cpu.to(device))

    values, weights_out = fi.quantize_query_fp8(q_cpu, w_cpu, eps=1e-4, rope=rope_on("cpu"))
    gpu_values, gpu_weights = fi.quantize_query_fp8(q_cpu.cuda(), w_cpu.cuda(), eps=1e-4,
                                                    rope=rope_on("cuda"))
    assert torch.equal(gpu_values.cpu().view(torch.uint8), values.view(torch.uint8))
    assert torch.equal(gpu_weights.cpu(), weights_out)
    (v4, s4), w4 = fi.quantize_query_mxfp4(q_cpu, w_cpu, rope=rope_on("cpu"))
    (gv4, gs4), gw4 = fi.quantize_query_mxfp4(q_cpu.cuda(), w_cpu.cuda(), rope=rope_on("cuda"))
    assert torch.equal(gv4.cpu(), v4) and torch.equal(gs4.cpu(), s4) and torch.equal(gw4.cpu(), w4)


@pytest.mark.parametrize("fmt", ["fp8", "mxfp4"])
def test_cuda_insert_and_gather_equal_the_cpu(rng, cuda_torch, fmt):
    torch = cuda_torch
    keys = torch.from_numpy(rng.standard_normal((500, 128)).astype(np.float32)).to(torch.bfloat16)
    slots = torch.from_numpy(rng.permutation(640)[:500].astype(np.int64))
    slots[7] = -1
    cpu_cache = fi.empty_k_cache(10, 64, 128, fmt, like=keys)
    cpu_cache.data.fill_(0xCD)
    gpu_cache = fi.empty_k_cache(10, 64, 128, fmt, like=keys.cuda())
    gpu_cache.data.fill_(0xCD)
    fi.insert_k_cache(cpu_cache, keys, slots)
    fi.insert_k_cache(gpu_cache, keys.cuda(), slots.cuda())
    torch.cuda.synchronize()
    assert torch.equal(gpu_cache.data.cpu(), cpu_cache.data)
    table = torch.from_numpy(rng.permutation(10).astype(np.int32).reshape(2, 5))
    cu = torch.tensor([0, 300, 620], dtype=torch.int32)
    want = fi.gather_k_workspace(cpu_cache, table, cu, num_keys=620)
    got = fi.gather_k_workspace(gpu_cache, table.cuda(), cu.cuda(), num_keys=620)
    assert torch.equal(got.values.cpu().view(torch.uint8), want.values.view(torch.uint8))
    assert torch.equal(got.scales.cpu().view(torch.uint8), want.scales.view(torch.uint8))


def test_cuda_mxfp4_quantizer_equals_the_cpu(rng, cuda_torch):
    torch = cuda_torch
    x = torch.from_numpy((rng.standard_normal((1000, 128)) * 1e3).astype(np.float32))
    values, scales = fi.quantize_mxfp4(x)
    gpu_values, gpu_scales = fi.quantize_mxfp4(x.cuda())
    assert torch.equal(gpu_values.cpu(), values) and torch.equal(gpu_scales.cpu(), scales)
    assert torch.equal(fi.dequantize_mxfp4(gpu_values, gpu_scales).cpu(),
                       fi.dequantize_mxfp4(values, scales))
    fp8 = fi.quantize_k_fp8(x)
    gpu_fp8 = fi.quantize_k_fp8(x.cuda())
    assert torch.equal(gpu_fp8.values.cpu().view(torch.uint8), fp8.values.view(torch.uint8))
    assert torch.equal(gpu_fp8.scales.cpu(), fp8.scales)


def test_torch_custom_query_ops_match_the_functions(rng, torch):
    import flashindexer.torch as fit

    q, weights, positions, table = query_problem(rng)
    rope = fi.Rope("interleaved", "last64", torch.from_numpy(table), torch.from_numpy(positions))
    values, weights_out = fit.quantize_query_fp8(torch.from_numpy(q), torch.from_numpy(weights),
                                                 1e-10, rope=rope)
    want_values, want_weights = fi.quantize_query_fp8(q, weights, eps=1e-10, rope=fi.Rope(
        "interleaved", "last64", table, positions))
    np.testing.assert_array_equal(values.view(torch.uint8).numpy(), want_values.view(np.uint8))
    np.testing.assert_array_equal(weights_out.numpy(), want_weights)
    (v4, s4), w4 = fit.quantize_query_mxfp4(torch.from_numpy(q), torch.from_numpy(weights),
                                            rope=rope)
    assert v4.shape == (9, 4, 64) and s4.shape == (9, 4, 4) and w4.shape == (9, 4)
