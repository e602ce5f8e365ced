// SPDX-License-Identifier: Apache-2.0
// The quantizers on CUDA tensors (quantize_k_fp8, quantize_mxfp4, dequantize_mxfp4 and the query
// quantizers with RoPE) against the CPU ops, byte for byte: random rows and adversarial ones
// (zero and all-equal rows, the e4m3 / E2M1 saturation edges, every E2M1 code and midpoint,
// UE8M0 scale edges, subnormals, NaN and infinities), padded and unaligned rows (the scalar
// path), poisoned outputs, repeated runs. The first tests check the kernels' integer encoders
// (src/cuda/quantize/codes.h) against the CPU's on the host and run without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/access.h"
#include "cuda/quantize/codes.h"
#include "support/compare.h"
#include "support/cuda.h"
#include "support/query_inputs.h"

namespace fitest {
namespace {

// ---------------------------------------------------------------------------------------------
// The encoders on the host (no GPU needed)

// Floats near every point where an encoder's answer changes: the E2M1 grid and its midpoints,
// powers of two (scale edges), the bf16 rounding boundaries of a few binades, plus specials.
std::vector<uint32_t> edge_bits() {
  std::vector<uint32_t> bits;
  const float anchors[] = {0.0f, 0.25f,  0.5f,   0.75f,     1.0f,      1.25f,     1.5f,   1.75f,
                           2.0f, 2.5f,   3.0f,   3.5f,      4.0f,      5.0f,      6.0f,   7.0f,
                           8.0f, 448.0f, 464.0f, 0x1p-126f, 0x1p-127f, 0x1p-149f, 3.4e38f};
  for (float anchor : anchors) {
    for (float sign : {1.0f, -1.0f}) {
      const uint32_t center = float_bits(sign * anchor);
      for (int delta = -64; delta <= 64; ++delta) bits.push_back(center + delta);
    }
  }
  for (uint32_t special : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00000u, 0x7F800001u,
                           0x80000000u, 0x00000001u, 0x7F7FFFFFu}) {
    bits.push_back(special);
  }
  return bits;
}

TEST(DeviceCodes, E2M1EncoderMatchesTheCpuOverASweepOfFloats) {
  std::vector<uint32_t> bits = edge_bits();
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t b : bits) {
    ASSERT_EQ(codes::e2m1_code(b), float_to_e2m1(bits_float(b))) << "bits " << std::hex << b;
  }
}

TEST(DeviceCodes, BranchFreeE2M1EncoderMatchesTheCpuOnEveryFloatNearTheGrid) {
  // Every float of magnitude 2^-3 to 10 (each rounding boundary of the grid and its binades),
  // both signs, then a sweep of all floats and the edges (specials, subnormals).
  for (uint32_t b = 0x3E000000u; b <= 0x41200000u; ++b) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const uint32_t v = b | sign;
      ASSERT_EQ(codes::e2m1_code_of(bits_float(v)), float_to_e2m1(bits_float(v)))
          << "bits " << std::hex << v;
    }
  }
  std::vector<uint32_t> bits = edge_bits();
  for (uint64_t b = 0; b < (1ull << 32); b += 997) bits.push_back(static_cast<uint32_t>(b));
  for (uint32_t b = 0; b < 4096; ++b) bits.push_back(b), bits.push_back(b | 0x80000000u);
  for (uint32_t b : bits) {
    ASSERT_EQ(codes::e2m1_code_of(bits_float(b)), float_to_e2m1(bits_float(b)))
        << "bits " << std::hex << b;
  }
}

TEST(DeviceCodes, ScaleExponentsMatchTheCpu) {
  std::vector<uint32_t> bits = edge_bits();
  for (uint64_t b = 1; b < 0x7F800000ull; b += 8191) bits.push_back(static_cast<uint32_t>(b));
  bits.push_back(0x7F800000u);  // an infinite amax: exponent 0, as frexp gives it
  for (uint32_t b : bits) {
    const float x = std::fabs(bits_float(b));
    if (!(x > 0.0f) || std::isnan(x)) continue;
    const uint32_t positive = float_bits(x);
    ASSERT_EQ(codes::ue8m0_byte(positive), ue8m0_ceil(x)) << "bits " << std::hex << positive;
    if (x >= 0x1p-126f) {  // pow2_ceil's inputs (amax / qmax) are never subnormal
      const float got = bits_float(codes::pow2_bits(codes::ceil_log2(positive)));
      ASSERT_EQ(float_bits(got), float_bits(pow2_ceil(x))) << "bits " << std::hex << positive;
    }
  }
}

// The kernels' MXFP4 scale byte against the CPU's (a division, then ue8m0_ceil) on every float
// whose mantissa is near the 1.5 edge or the ends of its binade, in every binade, and on a stride
// over all of them: infinity, the smallest-amax clamp and -0 among them.
TEST(DeviceCodes, Mxfp4ScaleByteMatchesTheCpuDivision) {
  constexpr float kSmallestAmax = kE2M1Max * 0x1p-126f;
  std::vector<uint32_t> bits = edge_bits();
  for (uint32_t field = 0; field <= 0xFF; ++field) {
    for (uint32_t m : {0u, 1u, 2u, 0x3FFFFEu, 0x3FFFFFu, 0x400000u, 0x400001u, 0x400002u, 0x7FFFFEu,
                       0x7FFFFFu}) {
      bits.push_back(field << 23 | m);
    }
  }
  for (uint64_t b = 0; b <= 0x7F800000ull; b += 4093) bits.push_back(static_cast<uint32_t>(b));
  bits.push_back(0x7F800000u);
  bits.push_back(0x80000000u);  // -0
  for (uint32_t b : bits) {
    const float amax = bits_float(b);
    if (std::isnan(amax) || amax < 0.0f) continue;
    ASSERT_EQ(codes::e2m1_scale_byte(b), ue8m0_ceil(std::max(amax, kSmallestAmax) / kE2M1Max))
        << "bits " << std::hex << b;
  }
}

// ---------------------------------------------------------------------------------------------
// Inputs

constexpr int kRepeats = 3;

// Rows of D values: the query generator's adversarial and random heads, plus rows of specials,
// rows hitting every E2M1 code and midpoint at a known block scale, and scale edges.
std::vector<float> quantizer_values(Rng& rng, int64_t rows, int head_dim) {
  std::vector<float> x = query_values(rng, rows, head_dim);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // E2M1 grid points and midpoints (and their neighbours) times 2^e, with 6 * 2^e in each block
  // so the block's scale is exactly 2^e.
  const float grid[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f,
                        2.0f, 2.5f,  3.0f, 3.5f,  4.0f, 5.0f,  5.5f, 6.0f};
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * head_dim;
    switch (r % 13) {
      case 6:
        for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(1.0f);
        row[1] = nan, row[5] = -nan, row[9] = inf, row[head_dim - 1] = -inf;
        break;
      case 7:
        for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(1.0f);
        row[3] = -nan;  // NaN alone: ignored by the amax, encoded as the CPU does
        break;
      case 8:
      case 9: {
        const int e = static_cast<int>(rng.uniform_int(-120, 120));
        for (int d = 0; d < head_dim; ++d) {
          const float base = grid[(d + r) % 16] * std::ldexp(1.0f, e);
          const int step = static_cast<int>(rng.uniform_int(-1, 1));
          const float v = bits_float(float_bits(base) + (base == 0.0f ? 0 : step));
          row[d] = (d % 3 == 0) ? -v : v;
        }
        for (int b = 0; b < head_dim / 32; ++b) row[b * 32 + 7] = 6.0f * std::ldexp(1.0f, e);
        break;
      }
      case 10:  // block maxima just above and at 6 * 2^e, and at the amax floor
        for (int d = 0; d < head_dim; ++d) row[d] = rng.normal(0x1p-130f);
        row[0] = bits_float(float_bits(6.0f) + 1);
        if (head_dim > 32) row[32] = 6.0f * 0x1p-126f;
        if (head_dim > 64) row[64] = 448.0f * 0x1p-20f;
        break;
      case 11:
        for (int d = 0; d < head_dim; ++d) row[d] = -0.0f;
        break;
      case 12:
        for (int d = 0; d < head_dim; ++d)
          row[d] = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-149, 127)));
        break;
      default:
        break;
    }
  }
  return x;
}

// A [rows, D] (or [M, H, D]) input of `dtype` with rows `pad` elements apart beyond D.
HostTensor input_tensor(Rng& rng, DType dtype, std::vector<int64_t> shape, int64_t pad) {
  const int head_dim = static_cast<int>(shape.back());
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  std::vector<float> x = quantizer_values(rng, rows, head_dim);
  HostTensor t(dtype, shape, pad > 0 ? head_dim + pad : 0);
  t.fill_bytes(0xEE);  // padding holds NaN-like garbage that must not be read as values
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t at = row_offset(t.view(), r);
    for (int d = 0; d < head_dim; ++d) {
      if (dtype == DType::kBF16) {
        t.data<uint16_t>()[at + d] = float_to_bf16(x[r * head_dim + d]);
      } else {
        t.data<float>()[at + d] = x[r * head_dim + d];
      }
    }
  }
  return t;
}

HostTensor poisoned(DType dtype, std::vector<int64_t> shape, int64_t row_stride = 0) {
  HostTensor t(dtype, std::move(shape), row_stride);
  t.fill_bytes(kPoisonByte);
  return t;
}

// Same bytes, except that two NaN floats count as equal (a NaN's payload is no contract).
::testing::AssertionResult SameBytes(const HostTensor& got, const HostTensor& want,
                                     bool floats = false) {
  if (got.byte_size() != want.byte_size()) return ::testing::AssertionFailure() << "sizes differ";
  if (floats) {
    for (size_t i = 0; i < want.byte_size() / 4; ++i) {
      const float a = got.data<float>()[i];
      const float b = want.data<float>()[i];
      if (std::isnan(a) && std::isnan(b)) continue;
      if (float_bits(a) != float_bits(b)) {
        return ::testing::AssertionFailure()
               << "float " << i << ": got " << a << ", expected " << b;
      }
    }
    return ::testing::AssertionSuccess();
  }
  for (size_t i = 0; i < want.byte_size(); ++i) {
    if (got.bytes()[i] != want.bytes()[i]) {
      return ::testing::AssertionFailure() << "byte " << i << ": got " << int{got.bytes()[i]}
                                           << ", expected " << int{want.bytes()[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------
// quantize_k_fp8 / quantize_mxfp4 / dequantize_mxfp4

struct RowCase {
  int head_dim;
  int64_t input_pad;   // elements between rows beyond D; odd values force the scalar path
  int64_t output_pad;  // bytes between value rows beyond the row
};

const RowCase kRowCases[] = {{128, 0, 0},  {64, 0, 0},  {32, 0, 0}, {256, 0, 0},
                             {128, 8, 16}, {128, 3, 5}, {64, 1, 0}};

TEST(QuantizeCuda, Fp8MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const RowCase& c : kRowCases) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << c.head_dim << " pads "
                                        << c.input_pad << "/" << c.output_pad);
      const int64_t rows = rng.uniform_int(1, 3000);
      const HostTensor input = input_tensor(rng, dtype, {rows, c.head_dim}, c.input_pad);
      HostTensor want_values = poisoned(DType::kE4M3, {rows, c.head_dim},
                                        c.output_pad > 0 ? c.head_dim + c.output_pad : 0);
      HostTensor want_scales = poisoned(DType::kF32, {rows});
      FI_ASSERT_OK(quantize_k_fp8(want_values.view(), want_scales.view(), input.view()));
      const DeviceTensor device_input = to_device(input);
      HostTensor got_values = poisoned(DType::kE4M3, {rows, c.head_dim},
                                       c.output_pad > 0 ? c.head_dim + c.output_pad : 0);
      HostTensor got_scales = poisoned(DType::kF32, {rows});
      DeviceTensor device_values = to_device(got_values);
      DeviceTensor device_scales = to_device(got_scales);
      for (int repeat = 0; repeat < kRepeats; ++repeat) {
        FI_ASSERT_OK(quantize_k_fp8(device_values.view, device_scales.view, device_input.view));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(got_values, device_values);
        to_host(got_scales, device_scales);
        ASSERT_TRUE(SameBytes(got_values, want_values)) << "repeat " << repeat;
        ASSERT_TRUE(SameBytes(got_scales, want_scales)) << "repeat " << repeat;
      }
    }
  }
}

TEST(QuantizeCuda, Mxfp4MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (const RowCase& c : kRowCases) {
      for (bool heads : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(dtype) << " D=" << c.head_dim << " pads " << c.input_pad << "/"
                     << c.output_pad << (heads ? " [M, H, D]" : " [N, D]"));
        const int64_t rows = rng.uniform_int(1, 2000);
        std::vector<int64_t> shape = heads ? std::vector<int64_t>{rows, 3, c.head_dim}
                                           : std::vector<int64_t>{rows, c.head_dim};
        const HostTensor input = input_tensor(rng, dtype, shape, c.input_pad);
        std::vector<int64_t> value_shape = shape;
        value_shape.back() = c.head_dim / 2;
        std::vector<int64_t> scale_shape = shape;
        scale_shape.back() = c.head_dim / 32;
        const int64_t value_stride = c.output_pad > 0 ? c.head_dim / 2 + c.output_pad : 0;
        HostTensor want_values = poisoned(DType::kE2M1x2, value_shape, value_stride);
        HostTensor want_scales =
            poisoned(DType::kUE8M0, scale_shape, c.output_pad > 0 ? c.head_dim / 32 + 1 : 0);
        FI_ASSERT_OK(quantize_mxfp4(want_values.view(), want_scales.view(), input.view()));
        const DeviceTensor device_input = to_device(input);
        HostTensor got_values = poisoned(DType::kE2M1x2, value_shape, value_stride);
        HostTensor got_scales =
            poisoned(DType::kUE8M0, scale_shape, c.output_pad > 0 ? c.head_dim / 32 + 1 : 0);
        DeviceTensor device_values = to_device(got_values);
        DeviceTensor device_scales = to_device(got_scales);
        for (int repeat = 0; repeat < kRepeats; ++repeat) {
          FI_ASSERT_OK(quantize_mxfp4(device_values.view, device_scales.view, device_input.view));
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          to_host(got_values, device_values);
          to_host(got_scales, device_scales);
          ASSERT_TRUE(SameBytes(got_values, want_values)) << "repeat " << repeat;
          ASSERT_TRUE(SameBytes(got_scales, want_scales)) << "repeat " << repeat;
        }
      }
    }
  }
}

// Every bf16 value under every scale: the bf16 kernels encode two values at a time in bf16
// (lanes.cuh, e2m1_pair), whose every step is checked here against the CPU's f32 encoding. Each
// block of 32 holds one anchor, 6 x 2^e or -7 x 2^e (a scale byte's edge, and just past it) for
// every binade e of the floats, beside 31 values of a sweep of all 65536 bf16 patterns (NaN and
// infinities among them, which may set the block's amax themselves), so every value meets every
// scale byte a block holding it can have.
TEST(QuantizeCuda, Mxfp4FromBf16MatchesTheCpuOnEveryValueUnderEveryScale) {
  SKIP_WITHOUT_GPU();
  constexpr int kHeadDim = 128;
  constexpr int kBlock = 32;
  std::vector<uint16_t> anchors;
  for (int e = -133; e <= 127; ++e) {
    for (float mantissa : {6.0f, -7.0f}) {
      anchors.push_back(float_to_bf16(std::ldexp(mantissa, e - 2)));
    }
  }
  constexpr int64_t kSweep = 65536;
  constexpr int64_t kPerBlock = kBlock - 1;
  const int64_t blocks_per_anchor = (kSweep + kPerBlock - 1) / kPerBlock;
  const int64_t blocks = static_cast<int64_t>(anchors.size()) * blocks_per_anchor;
  const int64_t rows = (blocks + kHeadDim / kBlock - 1) / (kHeadDim / kBlock);
  HostTensor input(DType::kBF16, {rows, kHeadDim});
  uint16_t* x = input.data<uint16_t>();
  int64_t block = 0;
  for (uint16_t a : anchors) {
    for (int64_t first = 0; first < kSweep; first += kPerBlock, ++block) {
      // The anchor's place moves with the block, so it meets every lane of the block's four.
      uint16_t* b = x + block * kBlock;
      const int at = static_cast<int>(block % kBlock);
      for (int i = 0, v = 0; i < kBlock; ++i) {
        b[i] = i == at ? a : static_cast<uint16_t>((first + v++) % kSweep);
      }
    }
  }
  for (; block < rows * (kHeadDim / kBlock); ++block) {
    for (int i = 0; i < kBlock; ++i) x[block * kBlock + i] = 0;
  }
  HostTensor want_values = poisoned(DType::kE2M1x2, {rows, kHeadDim / 2}, 0);
  HostTensor want_scales = poisoned(DType::kUE8M0, {rows, kHeadDim / kBlock}, 0);
  FI_ASSERT_OK(quantize_mxfp4(want_values.view(), want_scales.view(), input.view()));
  const DeviceTensor device_input = to_device(input);
  HostTensor got_values = poisoned(DType::kE2M1x2, {rows, kHeadDim / 2}, 0);
  HostTensor got_scales = poisoned(DType::kUE8M0, {rows, kHeadDim / kBlock}, 0);
  DeviceTensor device_values = to_device(got_values);
  DeviceTensor device_scales = to_device(got_scales);
  FI_ASSERT_OK(quantize_mxfp4(device_values.view, device_scales.view, device_input.view));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(got_values, device_values);
  to_host(got_scales, device_scales);
  ASSERT_TRUE(SameBytes(got_scales, want_scales));
  ASSERT_TRUE(SameBytes(got_values, want_values));
}

TEST(QuantizeCuda, Mxfp4DequantizeMatchesTheCpuOnEveryCodeAndScaleByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (const RowCase& c : kRowCases) {
    SCOPED_TRACE(::testing::Message() << "D=" << c.head_dim << " pads " << c.input_pad);
    const int64_t rows = 512;  // row r's first block takes scale byte r % 256
    const int64_t value_stride = c.input_pad > 0 ? c.head_dim / 2 + c.input_pad : 0;
    HostTensor values(DType::kE2M1x2, {rows, c.head_dim / 2}, value_stride);
    HostTensor scales(DType::kUE8M0, {rows, c.head_dim / 32});
    for (size_t i = 0; i < values.byte_size(); ++i)
      values.bytes()[i] = static_cast<uint8_t>(rng.bits32());
    for (int64_t r = 0; r < rows; ++r) {
      for (int b = 0; b < c.head_dim / 32; ++b) {
        scales.at<uint8_t>({r, b}) = static_cast<uint8_t>(b == 0 ? r % 256 : rng.bits32());
      }
    }
    const int64_t out_stride = c.output_pad > 0 ? c.head_dim + c.output_pad : 0;
    HostTensor want = poisoned(DType::kF32, {rows, c.head_dim}, out_stride);
    FI_ASSERT_OK(dequantize_mxfp4(want.view(), values.view(), scales.view()));
    HostTensor got = poisoned(DType::kF32, {rows, c.head_dim}, out_stride);
    DeviceTensor device_out = to_device(got);
    const DeviceTensor device_values = to_device(values);
    const DeviceTensor device_scales = to_device(scales);
    FI_ASSERT_OK(dequantize_mxfp4(device_out.view, device_values.view, device_scales.view));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(got, device_out);
    ASSERT_TRUE(SameBytes(got, want, /*floats=*/true));
  }
}

TEST(QuantizeCuda, EmptyInputsAreNoOps) {
  SKIP_WITHOUT_GPU();
  const TensorView input = TensorView::contiguous(nullptr, DType::kF32, {0, 128}, Device::kCUDA);
  const TensorView values = TensorView::contiguous(nullptr, DType::kE4M3, {0, 128}, Device::kCUDA);
  const TensorView scales = TensorView::contiguous(nullptr, DType::kF32, {0}, Device::kCUDA);
  FI_EXPECT_OK(quantize_k_fp8(values, scales, input));
  const TensorView packed = TensorView::contiguous(nullptr, DType::kE2M1x2, {0, 64}, Device::kCUDA);
  const TensorView blocks = TensorView::contiguous(nullptr, DType::kUE8M0, {0, 4}, Device::kCUDA);
  FI_EXPECT_OK(quantize_mxfp4(packed, blocks, input));
  FI_EXPECT_OK(dequantize_mxfp4(input, packed, blocks));
}

TEST(QuantizeCuda, RowLengthsOutsideTheKernelsAreUnsupported) {
  SKIP_WITHOUT_GPU();
  HostTensor input(DType::kF32, {4, 96});
  HostTensor values(DType::kE4M3, {4, 96});
  HostTensor scales(DType::kF32, {4});
  const DeviceTensor a = to_device(input), b = to_device(values), c = to_device(scales);
  EXPECT_TRUE(IsRejected(quantize_k_fp8(b.view, c.view, a.view), StatusCode::kUnsupported, {"96"}));
}

// ---------------------------------------------------------------------------------------------
// Query quantization

struct QueryRun {
  HostTensor q, weights, table, positions;
  QueryQuantOptions quant;
};

QueryRun query_run(Rng& rng, int64_t tokens, int64_t heads, int head_dim, DType q_dtype,
                   RopeStyle style, RopeDims dims, int64_t q_pad) {
  QueryRun run;
  run.q = input_tensor(rng, q_dtype, {tokens, heads, head_dim}, q_pad);
  std::vector<float> w(static_cast<size_t>(tokens * heads));
  for (float& v : w) v = rng.normal(3.0f);
  run.weights = float_tensor(rng.bernoulli(0.5) ? DType::kF32 : DType::kBF16, {tokens, heads}, w);
  std::vector<float> table_values;
  const int64_t table_rows = 1000;
  run.table =
      cos_sin_cache(rng.bernoulli(0.5) ? DType::kF32 : DType::kBF16, table_rows, table_values);
  std::vector<int64_t> positions;
  run.positions = position_tensor(rng, rng.bernoulli(0.5) ? DType::kI64 : DType::kI32, tokens,
                                  table_rows, positions);
  run.quant.eps = rng.bernoulli(0.5) ? 1e-10f : 1e-4f;
  run.quant.rope.style = style;
  run.quant.rope.dims = dims;
  if (style != RopeStyle::kNone) {
    run.quant.rope.cos_sin_cache = run.table.view();
    run.quant.rope.positions = run.positions.view();
  }
  return run;
}

struct DeviceQuery {
  DeviceTensor q, weights, table, positions;
  QueryQuantOptions quant;
  explicit DeviceQuery(const QueryRun& run)
      : q(to_device(run.q)),
        weights(to_device(run.weights)),
        table(to_device(run.table)),
        positions(to_device(run.positions)),
        quant(run.quant) {
    if (quant.rope.enabled()) {
      quant.rope.cos_sin_cache = table.view;
      quant.rope.positions = positions.view;
    }
  }
};

// quantize_query_fp8 on the device (its tensors in `device`) into poisoned host tensors of
// [tokens, heads, head_dim] values and [tokens, heads] weights.
void fp8_query_on_device(const DeviceQuery& device, HostTensor& values, HostTensor& weights) {
  const TensorView q = device.q.view;
  values = poisoned(DType::kE4M3, {q.shape[0], q.shape[1], q.shape[2]});
  weights = poisoned(DType::kF32, {q.shape[0], q.shape[1]});
  DeviceTensor device_values = to_device(values);
  DeviceTensor device_weights = to_device(weights);
  FI_ASSERT_OK(quantize_query_fp8(device_values.view, device_weights.view, device.q.view,
                                  device.weights.view, device.quant));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(values, device_values);
  to_host(weights, device_weights);
}

// quantize_query_fp8 of `run` on the CPU and on the device, byte for byte.
void expect_fp8_query_matches_the_cpu(const QueryRun& run, const DeviceQuery& device) {
  const TensorView q = run.q.view();
  HostTensor want_values = poisoned(DType::kE4M3, {q.shape[0], q.shape[1], q.shape[2]});
  HostTensor want_weights = poisoned(DType::kF32, {q.shape[0], q.shape[1]});
  FI_ASSERT_OK(quantize_query_fp8(want_values.view(), want_weights.view(), run.q.view(),
                                  run.weights.view(), run.quant));
  HostTensor got_values, got_weights;
  fp8_query_on_device(device, got_values, got_weights);
  EXPECT_TRUE(SameBytes(got_values, want_values));
  EXPECT_TRUE(SameBytes(got_weights, want_weights));
}

// The same for quantize_query_mxfp4: packed codes, block scales and weights.
void expect_mxfp4_query_matches_the_cpu(const QueryRun& run, const DeviceQuery& device) {
  const TensorView q = run.q.view();
  const int64_t tokens = q.shape[0], heads = q.shape[1], head_dim = q.shape[2];
  HostTensor want_values = poisoned(DType::kE2M1x2, {tokens, heads, head_dim / 2});
  HostTensor want_scales = poisoned(DType::kUE8M0, {tokens, heads, head_dim / 32});
  HostTensor want_weights = poisoned(DType::kF32, {tokens, heads});
  FI_ASSERT_OK(quantize_query_mxfp4(want_values.view(), want_scales.view(), want_weights.view(),
                                    run.q.view(), run.weights.view(), run.quant));
  HostTensor got_values = poisoned(DType::kE2M1x2, {tokens, heads, head_dim / 2});
  HostTensor got_scales = poisoned(DType::kUE8M0, {tokens, heads, head_dim / 32});
  HostTensor got_weights = poisoned(DType::kF32, {tokens, heads});
  DeviceTensor device_values = to_device(got_values);
  DeviceTensor device_scales = to_device(got_scales);
  DeviceTensor device_weights = to_device(got_weights);
  FI_ASSERT_OK(quantize_query_mxfp4(device_values.view, device_scales.view, device_weights.view,
                                    device.q.view, device.weights.view, device.quant));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(got_values, device_values);
  to_host(got_scales, device_scales);
  to_host(got_weights, device_weights);
  EXPECT_TRUE(SameBytes(got_values, want_values));
  EXPECT_TRUE(SameBytes(got_scales, want_scales));
  EXPECT_TRUE(SameBytes(got_weights, want_weights));
}

const RopeStyle kStyles[] = {RopeStyle::kNone, RopeStyle::kNeox, RopeStyle::kInterleaved};

TEST(QueryQuantCuda, Fp8MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int head_dim : {64, 128}) {  // the head dims the query ops take, all with RoPE
      for (RopeStyle style : kStyles) {
        for (RopeDims dims : {RopeDims::kFirst64, RopeDims::kLast64}) {
          for (int64_t q_pad : {0, 3}) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " D=" << head_dim << " rope "
                                              << rope_style_name(style) << " dims "
                                              << static_cast<int>(dims) << " pad " << q_pad);
            const int64_t tokens = rng.uniform_int(1, 300);
            const int64_t heads = rng.pick(std::vector<int64_t>{1, 8, 64});
            const QueryRun run = query_run(rng, tokens, heads, head_dim, dtype, style, dims, q_pad);
            HostTensor want_values = poisoned(DType::kE4M3, {tokens, heads, head_dim});
            HostTensor want_weights = poisoned(DType::kF32, {tokens, heads});
            FI_ASSERT_OK(quantize_query_fp8(want_values.view(), want_weights.view(), run.q.view(),
                                            run.weights.view(), run.quant));
            const DeviceQuery device(run);
            HostTensor got_values = poisoned(DType::kE4M3, {tokens, heads, head_dim});
            HostTensor got_weights = poisoned(DType::kF32, {tokens, heads});
            DeviceTensor device_values = to_device(got_values);
            DeviceTensor device_weights = to_device(got_weights);
            for (int repeat = 0; repeat < kRepeats; ++repeat) {
              FI_ASSERT_OK(quantize_query_fp8(device_values.view, device_weights.view,
                                              device.q.view, device.weights.view, device.quant));
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
              to_host(got_values, device_values);
              to_host(got_weights, device_weights);
              ASSERT_TRUE(SameBytes(got_values, want_values)) << "repeat " << repeat;
              ASSERT_TRUE(SameBytes(got_weights, want_weights)) << "repeat " << repeat;
            }
          }
        }
      }
    }
  }
}

TEST(QueryQuantCuda, Mxfp4MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int head_dim : {64, 128}) {  // the head dims the query ops take, all with RoPE
      for (RopeStyle style : kStyles) {
        for (RopeDims dims : {RopeDims::kFirst64, RopeDims::kLast64}) {
          SCOPED_TRACE(::testing::Message()
                       << dtype_name(dtype) << " D=" << head_dim << " rope "
                       << rope_style_name(style) << " dims " << static_cast<int>(dims));
          const int64_t tokens = rng.uniform_int(1, 300);
          const int64_t heads = rng.pick(std::vector<int64_t>{1, 32, 64});
          const QueryRun run = query_run(rng, tokens, heads, head_dim, dtype, style, dims, 0);
          expect_mxfp4_query_matches_the_cpu(run, DeviceQuery(run));
        }
      }
    }
  }
}

// 300K rows, many waves of the row kernels' blocks (the other cases fit in one): 3 heads a token
// put the two rows of some lane groups in different tokens (each its own RoPE position), 64 heads
// every pair in one token.
TEST(QueryQuantCuda, ManyWavesOfRowsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  constexpr int kDim = 128;
  for (int64_t heads : {3, 64}) {
    for (RopeStyle style : kStyles) {
      SCOPED_TRACE(::testing::Message() << heads << " heads, rope " << rope_style_name(style));
      const int64_t tokens = 300001 / heads;
      const QueryRun run =
          query_run(rng, tokens, heads, kDim, DType::kBF16, style, RopeDims::kFirst64, 0);
      const DeviceQuery device(run);
      expect_fp8_query_matches_the_cpu(run, device);
      expect_mxfp4_query_matches_the_cpu(run, device);
    }
  }
}

// A cos/sin cache whose rows are not 16-byte aligned (row stride 65) is read an entry at a time:
// the same bytes as the CPU.
TEST(QueryQuantCuda, UnalignedCosSinRowsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType table_dtype : {DType::kF32, DType::kBF16}) {
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      SCOPED_TRACE(::testing::Message()
                   << dtype_name(table_dtype) << " " << rope_style_name(style));
      QueryRun run = query_run(rng, 77, 8, 128, DType::kBF16, style, RopeDims::kLast64, 0);
      std::vector<float> values;
      const HostTensor dense = cos_sin_cache(table_dtype, 1000, values);
      HostTensor padded(table_dtype, {1000, 64}, 65);
      for (int64_t p = 0; p < 1000; ++p) {
        std::memcpy(padded.bytes() + p * 65 * dtype_size(table_dtype),
                    dense.bytes() + p * 64 * dtype_size(table_dtype), 64 * dtype_size(table_dtype));
      }
      run.table = std::move(padded);
      run.quant.rope.cos_sin_cache = run.table.view();
      expect_fp8_query_matches_the_cpu(run, DeviceQuery(run));
    }
  }
}

// On CUDA tensors the positions are not read on the host: a token whose position lies outside
// the cos/sin cache is quantized unrotated (what the CPU computes without RoPE for it).
TEST(QueryQuantCuda, PositionOutsideTheTableLeavesTheTokenUnrotated) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t tokens = 4, heads = 8;
  QueryRun run =
      query_run(rng, tokens, heads, 128, DType::kBF16, RopeStyle::kNeox, RopeDims::kFirst64, 0);
  HostTensor positions(DType::kI64, {tokens});
  const int64_t bad[] = {5, -1, 1000, 7};
  for (int64_t t = 0; t < tokens; ++t) positions.data<int64_t>()[t] = bad[t];
  run.positions = std::move(positions);
  run.quant.rope.positions = run.positions.view();
  HostTensor got_values, got_weights;
  fp8_query_on_device(DeviceQuery(run), got_values, got_weights);
  for (int64_t t : {1, 2}) {
    QueryQuantOptions plain = run.quant;
    plain.rope = {};
    HostTensor one_q(DType::kBF16, {1, heads, 128});
    std::memcpy(one_q.bytes(), &run.q.at<uint16_t>({t, 0, 0}), one_q.byte_size());
    HostTensor one_w(run.weights.view().dtype, {1, heads});
    std::memcpy(one_w.bytes(), run.weights.bytes() + t * heads * dtype_size(one_w.view().dtype),
                one_w.byte_size());
    HostTensor want_values(DType::kE4M3, {1, heads, 128});
    HostTensor want_weights(DType::kF32, {1, heads});
    FI_ASSERT_OK(quantize_query_fp8(want_values.view(), want_weights.view(), one_q.view(),
                                    one_w.view(), plain));
    EXPECT_EQ(std::memcmp(want_values.bytes(), &got_values.at<uint8_t>({t, 0, 0}),
                          want_values.byte_size()),
              0)
        << "token " << t;
  }
}

}  // namespace
}  // namespace fitest
