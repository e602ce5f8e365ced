// SPDX-License-Identifier: Apache-2.0
// Quantizers and dequantizers (quantize.h, spec §3.2, §3.3) on CPU tensors.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

// Quantizer input in f32 or bf16, and the float values the quantizer must see.
struct QuantizerInput {
  HostTensor tensor;
  std::vector<float> values;  // what the input holds, as floats (bf16 decoded)
};

// Rows that exercise every branch: zeros, tiny (amax < 1e-4), a single nonzero, huge,
// an exact power-of-two maximum, negative only, then random rows over 40 binades. Within a
// row every 32-element block gets its own magnitude (zero and subnormal blocks included) so
// MXFP4 block scales differ.
std::vector<float> quantizer_rows(Rng& rng, int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * cols;
    const float row_sigma = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-20, 20)));
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t block = c / kMxfp4BlockSize;
      const float block_sigma =
          (block + r) % 5 == 0 ? 1.0f : std::ldexp(1.0f, static_cast<int>((block * 7 + r) % 9) - 4);
      row[c] = rng.normal(row_sigma * block_sigma);
    }
    switch (r) {
      case 0:
        std::fill(row, row + cols, 0.0f);
        break;
      case 1:
        for (int64_t c = 0; c < cols; ++c) row[c] = rng.normal(1e-6f);
        break;
      case 2:
        std::fill(row, row + cols, 0.0f);
        row[cols / 3] = -3.0f;
        break;
      case 3:
        for (int64_t c = 0; c < cols; ++c) row[c] = rng.normal(1e30f);
        break;
      case 4:
        row[cols - 1] = 448.0f * 4.0f;
        for (int64_t c = 0; c + 1 < cols; ++c) row[c] = std::fmod(row[c], 1000.0f);
        break;
      case 5:
        for (int64_t c = 0; c < cols; ++c) row[c] = -std::fabs(row[c]);
        break;
      case 6:  // a zero block and a subnormal block inside an ordinary row
        for (int64_t c = 0; c < std::min<int64_t>(cols, 32); ++c) row[c] = 0.0f;
        for (int64_t c = 32; c < std::min<int64_t>(cols, 64); ++c) row[c] = rng.normal(1e-40f);
        break;
      default:
        break;
    }
  }
  return x;
}

QuantizerInput make_input(Rng& rng, DType dtype, std::vector<int64_t> shape) {
  int64_t count = 1;
  for (int64_t extent : shape) count *= extent;
  const int64_t cols = shape.back();
  QuantizerInput in;
  in.values = quantizer_rows(rng, count / cols, cols);
  in.tensor = HostTensor(dtype, shape);
  for (int64_t i = 0; i < count; ++i) {
    if (dtype == DType::kBF16) {
      const uint16_t bits = float_to_bf16(in.values[i]);
      in.tensor.data<uint16_t>()[i] = bits;
      in.values[i] = bf16_to_float(bits);
    } else {
      in.tensor.data<float>()[i] = in.values[i];
    }
  }
  return in;
}

bool is_power_of_two(float x) {
  int exponent = 0;
  return x > 0 && std::isfinite(x) && std::frexp(x, &exponent) == 0.5f;
}

// Half the e4m3 grid spacing around |y| (spacing 2^-9 below the smallest normal 2^-6).
double e4m3_half_ulp(double y) {
  if (y < std::ldexp(1.0, -6)) return std::ldexp(1.0, -10);
  int exponent = 0;
  std::frexp(y, &exponent);  // y in [2^(exponent-1), 2^exponent)
  return std::ldexp(1.0, exponent - 1 - 4);
}

// Half the E2M1 grid spacing around |y| <= 6.
double e2m1_half_gap(double y) { return y < 2.0 ? 0.25 : (y < 4.0 ? 0.5 : 1.0); }

const DType kInputDtypes[] = {DType::kF32, DType::kBF16};
const int kHeadDims[] = {128, 64};

// ----------------------------------------------------------------------------- FP8

TEST(QuantizeFp8, ScalesArePowersOfTwoFromTheRowMaximum) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (int D : kHeadDims) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << D);
      const int64_t N = 40;
      QuantizerInput in = make_input(rng, dtype, {N, D});
      HostTensor values(DType::kE4M3, {N, D});
      HostTensor scales(DType::kF32, {N});
      FI_ASSERT_OK(quantize_k_fp8(values.view(), scales.view(), in.tensor.view()));
      for (int64_t r = 0; r < N; ++r) {
        float amax = 0;
        for (int d = 0; d < D; ++d) amax = std::max(amax, std::fabs(in.values[r * D + d]));
        const float scale = scales.data<float>()[r];
        EXPECT_TRUE(is_power_of_two(scale)) << "row " << r << " scale " << scale;
        EXPECT_EQ(scale, pow2_ceil(std::max(amax, 1e-4f) / kE4M3Max)) << "row " << r;
      }
    }
  }
}

TEST(QuantizeFp8, ValuesFitE4M3AndRowMaximumMapsNear448) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t N = 40;
    const int D = 128;
    QuantizerInput in = make_input(rng, dtype, {N, D});
    HostTensor values(DType::kE4M3, {N, D});
    HostTensor scales(DType::kF32, {N});
    FI_ASSERT_OK(quantize_k_fp8(values.view(), scales.view(), in.tensor.view()));
    for (int64_t r = 0; r < N; ++r) {
      float amax = 0;
      float max_code_value = 0;
      for (int d = 0; d < D; ++d) {
        amax = std::max(amax, std::fabs(in.values[r * D + d]));
        const float v = e4m3_to_float(values.bytes()[r * D + d]);
        ASSERT_FALSE(std::isnan(v)) << "row " << r << " d " << d << ": NaN code";
        ASSERT_LE(std::fabs(v), kE4M3Max);
        max_code_value = std::max(max_code_value, std::fabs(v));
      }
      if (amax >= 1e-4f) {
        EXPECT_GE(max_code_value, 224.0f)
            << "row " << r << " amax " << amax << " does not use the top binade of e4m3";
      }
    }
  }
}

TEST(QuantizeFp8, DequantizedValuesWithinHalfUlp) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (int D : kHeadDims) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << D);
      const int64_t N = 40;
      QuantizerInput in = make_input(rng, dtype, {N, D});
      HostTensor values(DType::kE4M3, {N, D});
      HostTensor scales(DType::kF32, {N});
      HostTensor restored(DType::kF32, {N, D});
      FI_ASSERT_OK(quantize_k_fp8(values.view(), scales.view(), in.tensor.view()));
      FI_ASSERT_OK(dequantize_k_fp8(restored.view(), values.view(), scales.view()));
      for (int64_t r = 0; r < N; ++r) {
        const double scale = scales.data<float>()[r];
        for (int d = 0; d < D; ++d) {
          const double x = in.values[r * D + d];
          const double y = restored.data<float>()[r * D + d];
          ASSERT_LE(std::fabs(y - x) / scale, e4m3_half_ulp(std::fabs(x) / scale))
              << "row " << r << " d " << d << " x=" << x << " restored " << y;
        }
      }
    }
  }
}

TEST(QuantizeFp8, AllZeroRowGetsTheMinimumScale) {
  HostTensor input(DType::kF32, {2, 128});
  input.fill<float>(0.0f);
  HostTensor values(DType::kE4M3, {2, 128});
  values.fill_bytes(kPoisonByte);
  HostTensor scales(DType::kF32, {2});
  FI_ASSERT_OK(quantize_k_fp8(values.view(), scales.view(), input.view()));
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(scales.data<float>()[r], pow2_ceil(1e-4f / kE4M3Max));
    EXPECT_EQ(scales.data<float>()[r], std::ldexp(1.0f, -22));
    for (int d = 0; d < 128; ++d) EXPECT_EQ(e4m3_to_float(values.bytes()[r * 128 + d]), 0.0f);
  }
}

TEST(QuantizeFp8, MatchesReferenceBitForBit) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (int D : kHeadDims) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << D);
      const int64_t N = 57;
      QuantizerInput in = make_input(rng, dtype, {N, D});
      HostTensor values(DType::kE4M3, {N, D});
      HostTensor scales(DType::kF32, {N});
      FI_ASSERT_OK(quantize_k_fp8(values.view(), scales.view(), in.tensor.view()));
      std::vector<uint8_t> expected_values(static_cast<size_t>(N * D));
      std::vector<float> expected_scales(static_cast<size_t>(N));
      for (int64_t r = 0; r < N; ++r) {
        reference::quantize_fp8_row(&expected_values[r * D], &expected_scales[r], &in.values[r * D],
                                    D);
      }
      for (int64_t r = 0; r < N; ++r) {
        ASSERT_EQ(float_bits(scales.data<float>()[r]), float_bits(expected_scales[r]))
            << "row " << r;
        for (int d = 0; d < D; ++d) {
          ASSERT_EQ(values.bytes()[r * D + d], expected_values[r * D + d])
              << "row " << r << " d " << d;
        }
      }
    }
  }
}

TEST(QuantizeFp8, DequantizeMatchesElementwiseDecode) {
  FI_SEEDED_RNG(rng);
  for (int D : kHeadDims) {
    SCOPED_TRACE(::testing::Message() << "D=" << D);
    const int64_t N = 64;
    HostTensor values(DType::kE4M3, {N, D});
    HostTensor scales(DType::kF32, {N});
    for (int64_t i = 0; i < N * D; ++i) values.bytes()[i] = static_cast<uint8_t>(rng.bits32());
    for (int64_t r = 0; r < N; ++r) {
      // Powers of two (what the quantizer writes) and arbitrary positive scales.
      scales.data<float>()[r] = r % 2 == 0
                                    ? std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-30, 30)))
                                    : static_cast<float>(rng.uniform(1e-3, 1e3));
    }
    HostTensor out(DType::kF32, {N, D});
    out.fill<uint32_t>(kPoisonLogitBits);
    FI_ASSERT_OK(dequantize_k_fp8(out.view(), values.view(), scales.view()));
    for (int64_t r = 0; r < N; ++r) {
      for (int d = 0; d < D; ++d) {
        const float expected = e4m3_to_float(values.bytes()[r * D + d]) * scales.data<float>()[r];
        const float got = out.data<float>()[r * D + d];
        if (std::isnan(expected)) {
          ASSERT_TRUE(std::isnan(got)) << "row " << r << " d " << d;
          ASSERT_NE(float_bits(got), kPoisonLogitBits)
              << "row " << r << " d " << d << " not written";
        } else {
          ASSERT_EQ(float_bits(got), float_bits(expected)) << "row " << r << " d " << d;
        }
      }
    }
  }
}

TEST(QuantizeFp8, RejectsInputThatIsNotF32OrBf16) {
  HostTensor input(DType::kI32, {4, 128});
  HostTensor values(DType::kE4M3, {4, 128});
  HostTensor scales(DType::kF32, {4});
  EXPECT_TRUE(IsRejected(quantize_k_fp8(values.view(), scales.view(), input.view()),
                         StatusCode::kInvalidArgument, {"input"}));
}

TEST(QuantizeFp8, RejectsScalesOfTheWrongLength) {
  HostTensor input(DType::kF32, {4, 128});
  input.fill<float>(1.0f);
  HostTensor values(DType::kE4M3, {4, 128});
  HostTensor scales(DType::kF32, {5});
  EXPECT_TRUE(IsRejected(quantize_k_fp8(values.view(), scales.view(), input.view()),
                         StatusCode::kInvalidArgument, {"scales"}));
}

TEST(QuantizeFp8, RejectsValuesOfTheWrongDtype) {
  HostTensor input(DType::kF32, {4, 128});
  input.fill<float>(1.0f);
  HostTensor values(DType::kF32, {4, 128});
  HostTensor scales(DType::kF32, {4});
  EXPECT_TRUE(IsRejected(quantize_k_fp8(values.view(), scales.view(), input.view()),
                         StatusCode::kInvalidArgument, {"values"}));
  HostTensor out(DType::kF32, {4, 128});
  HostTensor codes(DType::kU8, {4, 128});
  EXPECT_TRUE(IsRejected(dequantize_k_fp8(out.view(), codes.view(), scales.view()),
                         StatusCode::kInvalidArgument, {"values"}));
}

TEST(QuantizeFp8, RejectsNullData) {
  HostTensor input(DType::kF32, {4, 128});
  HostTensor values(DType::kE4M3, {4, 128});
  HostTensor scales(DType::kF32, {4});
  TensorView null_input = input.view();
  null_input.data = nullptr;
  EXPECT_TRUE(IsRejected(quantize_k_fp8(values.view(), scales.view(), null_input),
                         StatusCode::kInvalidArgument, {"input"}));
}

// ----------------------------------------------------------------------------- MXFP4

struct Mxfp4Output {
  HostTensor values;
  HostTensor scales;
};

Mxfp4Output mxfp4_output(std::vector<int64_t> shape) {
  const int64_t D = shape.back();
  std::vector<int64_t> value_shape = shape;
  value_shape.back() = D / 2;
  std::vector<int64_t> scale_shape = shape;
  scale_shape.back() = D / kMxfp4BlockSize;
  Mxfp4Output out{HostTensor(DType::kE2M1x2, value_shape), HostTensor(DType::kUE8M0, scale_shape)};
  out.values.fill_bytes(kPoisonByte);
  out.scales.fill_bytes(kPoisonByte);
  return out;
}

// Shapes: keys [N, D] and query heads [M, H, D].
const std::vector<std::vector<int64_t>> kMxfp4Shapes = {
    {37, 128}, {29, 64}, {5, 32, 128}, {3, 64, 64}};

TEST(QuantizeMxfp4, ScaleByteIsCeilOfBlockMaximumOverSix) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (const auto& shape : kMxfp4Shapes) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dtype) << " rank " << shape.size() << " D=" << shape.back());
      QuantizerInput in = make_input(rng, dtype, shape);
      Mxfp4Output out = mxfp4_output(shape);
      FI_ASSERT_OK(quantize_mxfp4(out.values.view(), out.scales.view(), in.tensor.view()));
      const int64_t blocks = static_cast<int64_t>(in.values.size()) / kMxfp4BlockSize;
      for (int64_t b = 0; b < blocks; ++b) {
        float amax = 0;
        for (int i = 0; i < kMxfp4BlockSize; ++i) {
          amax = std::max(amax, std::fabs(in.values[b * kMxfp4BlockSize + i]));
        }
        const float clamped = std::max(amax, kE2M1Max * std::ldexp(1.0f, -126));
        ASSERT_EQ(out.scales.bytes()[b], ue8m0_ceil(clamped / kE2M1Max))
            << "block " << b << " amax " << amax;
      }
    }
  }
}

TEST(QuantizeMxfp4, ValuesWithinE2M1RoundingError) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (const auto& shape : kMxfp4Shapes) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dtype) << " rank " << shape.size() << " D=" << shape.back());
      QuantizerInput in = make_input(rng, dtype, shape);
      Mxfp4Output out = mxfp4_output(shape);
      FI_ASSERT_OK(quantize_mxfp4(out.values.view(), out.scales.view(), in.tensor.view()));
      HostTensor restored(DType::kF32, shape);
      FI_ASSERT_OK(dequantize_mxfp4(restored.view(), out.values.view(), out.scales.view()));
      for (size_t i = 0; i < in.values.size(); ++i) {
        const double scale = ue8m0_to_float(out.scales.bytes()[i / kMxfp4BlockSize]);
        const double y = std::fabs(static_cast<double>(in.values[i])) / scale;
        ASSERT_LE(y, kE2M1Max) << "element " << i << " exceeds the E2M1 range after scaling";
        const double error =
            std::fabs(restored.data<float>()[i] - static_cast<double>(in.values[i])) / scale;
        ASSERT_LE(error, e2m1_half_gap(y)) << "element " << i << " x=" << in.values[i]
                                           << " restored " << restored.data<float>()[i];
      }
    }
  }
}

TEST(QuantizeMxfp4, EvenElementGoesInLowNibble) {
  // One block with amax 6 (scale byte 127 = 1.0): element 2i -> low nibble of byte i.
  HostTensor input(DType::kF32, {1, 32});
  input.fill<float>(0.0f);
  float* x = input.data<float>();
  x[0] = 0.5f;    // code 1
  x[1] = 6.0f;    // code 7
  x[2] = -1.0f;   // code 0xA
  x[3] = 3.0f;    // code 5
  x[30] = 1.5f;   // code 3
  x[31] = -4.0f;  // code 0xE
  Mxfp4Output out = mxfp4_output({1, 32});
  FI_ASSERT_OK(quantize_mxfp4(out.values.view(), out.scales.view(), input.view()));
  EXPECT_EQ(out.scales.bytes()[0], 127);
  EXPECT_EQ(out.values.bytes()[0], 0x71);
  EXPECT_EQ(out.values.bytes()[1], 0x5A);
  EXPECT_EQ(out.values.bytes()[15], 0xE3);
  for (int i = 2; i < 15; ++i) EXPECT_EQ(out.values.bytes()[i] & 0x77, 0) << "byte " << i;
}

TEST(QuantizeMxfp4, MatchesReferenceBitForBit) {
  FI_SEEDED_RNG(rng);
  for (DType dtype : kInputDtypes) {
    for (const auto& shape : kMxfp4Shapes) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(dtype) << " rank " << shape.size() << " D=" << shape.back());
      QuantizerInput in = make_input(rng, dtype, shape);
      Mxfp4Output out = mxfp4_output(shape);
      FI_ASSERT_OK(quantize_mxfp4(out.values.view(), out.scales.view(), in.tensor.view()));
      const int D = static_cast<int>(shape.back());
      const int64_t rows = static_cast<int64_t>(in.values.size()) / D;
      std::vector<uint8_t> values(static_cast<size_t>(rows * D / 2));
      std::vector<uint8_t> scales(static_cast<size_t>(rows * D / kMxfp4BlockSize));
      for (int64_t r = 0; r < rows; ++r) {
        reference::quantize_mxfp4_row(&values[r * D / 2], &scales[r * D / kMxfp4BlockSize],
                                      &in.values[r * D], D);
      }
      for (size_t i = 0; i < values.size(); ++i) {
        ASSERT_EQ(out.values.bytes()[i], values[i]) << "value byte " << i;
      }
      for (size_t i = 0; i < scales.size(); ++i) {
        ASSERT_EQ(out.scales.bytes()[i], scales[i]) << "scale byte " << i;
      }
    }
  }
}

TEST(QuantizeMxfp4, DequantizeMatchesElementwiseDecode) {
  FI_SEEDED_RNG(rng);
  for (const auto& shape : kMxfp4Shapes) {
    SCOPED_TRACE(::testing::Message() << "rank " << shape.size() << " D=" << shape.back());
    int64_t count = 1;
    for (int64_t extent : shape) count *= extent;
    Mxfp4Output in = mxfp4_output(shape);
    for (int64_t i = 0; i < count / 2; ++i)
      in.values.bytes()[i] = static_cast<uint8_t>(rng.bits32());
    for (int64_t i = 0; i < count / kMxfp4BlockSize; ++i) {
      in.scales.bytes()[i] = static_cast<uint8_t>(rng.uniform_int(0, 254));
    }
    HostTensor out(DType::kF32, shape);
    FI_ASSERT_OK(dequantize_mxfp4(out.view(), in.values.view(), in.scales.view()));
    for (int64_t i = 0; i < count; ++i) {
      const uint8_t byte = in.values.bytes()[i / 2];
      const uint8_t code = i % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      const float expected =
          e2m1_to_float(code) * ue8m0_to_float(in.scales.bytes()[i / kMxfp4BlockSize]);
      const float got = out.data<float>()[i];
      ASSERT_TRUE(got == expected) << "element " << i << " code " << int{code} << " scale byte "
                                   << int{in.scales.bytes()[i / kMxfp4BlockSize]} << ": got " << got
                                   << " expected " << expected;
    }
  }
}

TEST(QuantizeMxfp4, RejectsHeadDimNotMultipleOf32) {
  HostTensor input(DType::kF32, {4, 48});
  input.fill<float>(1.0f);
  HostTensor values(DType::kE2M1x2, {4, 24});
  HostTensor scales(DType::kUE8M0, {4, 1});
  EXPECT_TRUE(IsRejectedNamingAnyOf(quantize_mxfp4(values.view(), scales.view(), input.view()),
                                    {StatusCode::kInvalidArgument}, {"input", "values", "scales"}));
}

TEST(QuantizeMxfp4, RejectsScalesOfTheWrongShape) {
  HostTensor input(DType::kF32, {4, 128});
  input.fill<float>(1.0f);
  HostTensor values(DType::kE2M1x2, {4, 64});
  HostTensor scales(DType::kUE8M0, {4, 2});
  EXPECT_TRUE(IsRejected(quantize_mxfp4(values.view(), scales.view(), input.view()),
                         StatusCode::kInvalidArgument, {"scales"}));
}

TEST(QuantizeMxfp4, RejectsInputThatIsNotF32OrBf16) {
  HostTensor input(DType::kE4M3, {4, 128});
  HostTensor values(DType::kE2M1x2, {4, 64});
  HostTensor scales(DType::kUE8M0, {4, 4});
  EXPECT_TRUE(IsRejected(quantize_mxfp4(values.view(), scales.view(), input.view()),
                         StatusCode::kInvalidArgument, {"input"}));
}

}  // namespace
}  // namespace fitest
