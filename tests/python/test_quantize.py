# SPDX-License-Identifier: Apache-2.0
"""Quantizers: bit-exact with the NumPy reference on every input form; dequantizers exact."""

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import reference

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_fp8_quantize_is_bit_exact_with_reference(rng):
    x = (rng.standard_normal((257, 128)) * rng.uniform(1e-6, 1e3, (257, 1))).astype(np.float32)
    x[3] = 0  # an all-zero row takes the 1e-4 floor
    x[4, :5] = [np.inf, -1e30, 1e-40, -0.0, 448]
    values, scales = fi.quantize_k_fp8(x)
    assert values.dtype == ml_dtypes.float8_e4m3fn and scales.dtype == np.float32
    expected_values, expected_scales = reference.quantize_k_fp8(x)
    np.testing.assert_array_equal(values.view(np.uint8), expected_values)
    np.testing.assert_array_equal(scales, expected_scales)


def test_fp8_encoding_matches_ml_dtypes_rounding(rng):
    x = (rng.standard_normal(10000) * 100).astype(np.float32)
    x = np.clip(x, -448, 448)
    ours = reference.encode_e4m3(x)
    theirs = x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)


def test_fp8_quantize_takes_bfloat16_input(rng):
    x = rng.standard_normal((33, 64), np.float32).astype(ml_dtypes.bfloat16)
    values, scales = fi.quantize_k_fp8(x)
    expected_values, expected_scales = reference.quantize_k_fp8(x.astype(np.float32))
    np.testing.assert_array_equal(values.view(np.uint8), expected_values)
    np.testing.assert_array_equal(scales, expected_scales)


def test_fp8_dequantize_is_exact_and_accepts_raw_bytes(rng):
    values, scales = fi.quantize_k_fp8(rng.standard_normal((40, 128), np.float32))
    expected = reference.dequantize_k_fp8(values, scales)
    np.testing.assert_array_equal(fi.dequantize_k_fp8(values, scales), expected)
    np.testing.assert_array_equal(fi.dequantize_k_fp8(values.view(np.uint8), scales), expected)


def test_fp8_quantize_writes_into_out(rng):
    x = rng.standard_normal((8, 128), np.float32)
    values = np.zeros((8, 128), np.uint8)
    scales = np.zeros(8, np.float32)
    result = fi.quantize_k_fp8(x, out=(values, scales))
    assert result.values is values and result.scales is scales
    np.testing.assert_array_equal(values, reference.quantize_k_fp8(x)[0])


@pytest.mark.parametrize("shape", [(17, 128), (5, 32, 64)])
def test_mxfp4_quantize_is_bit_exact_with_reference(rng, shape):
    x = rng.standard_normal(shape) * rng.uniform(1e-3, 1e3, shape[:-1] + (1,))
    x = x.astype(np.float32)
    values, scales = fi.quantize_mxfp4(x)
    assert values.shape == shape[:-1] + (shape[-1] // 2,)
    assert scales.shape == shape[:-1] + (shape[-1] // 32,)
    expected_values, expected_scales = reference.quantize_mxfp4(x)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(scales, expected_scales)
    np.testing.assert_array_equal(fi.dequantize_mxfp4(values, scales),
                                  reference.dequantize_mxfp4(values, scales))


def test_quantize_rejects_wrong_input_dtype_with_type_error():
    with pytest.raises(TypeError, match="quantize_k_fp8: input has dtype"):
        fi.quantize_k_fp8(np.zeros((4, 128), np.float64))
    with pytest.raises(TypeError, match="input has dtype i32"):
        fi.quantize_k_fp8(np.zeros((4, 128), np.int32))


def test_quantize_rejects_wrong_output_shape_with_value_error():
    x = np.zeros((4, 128), np.float32)
    with pytest.raises(ValueError, match="quantize_k_fp8: scales"):
        fi.quantize_k_fp8(x, out=(np.zeros((4, 128), np.uint8), np.zeros(5, np.float32)))
