// SPDX-License-Identifier: Apache-2.0
// CPU quantizers (spec §3.2, §3.3): one OpenMP task per row.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/elements.h"

namespace flashindexer::cpu {
namespace {

constexpr int kMaxHeadDim = 1024;  // rows longer than this are rejected by src/api

float row_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

void quantize_k_fp8_row(uint8_t* values, float* scale, const float* x, int head_dim) {
  quantize_fp8_row(values, scale, x, head_dim, 1e-4f);
}

void quantize_fp8_row(uint8_t* values, float* scale, const float* x, int head_dim, float floor) {
  const float row_scale = pow2_ceil(std::max(row_amax(x, head_dim), floor) / kE4M3Max);
  // Dividing by a power of two is exact, so multiplying by its reciprocal is the same.
  const float inverse = 1.0f / row_scale;
  for (int d = 0; d < head_dim; ++d) values[d] = float_to_e4m3(x[d] * inverse);
  *scale = row_scale;
}

void quantize_mxfp4_row(uint8_t* values, uint8_t* scales, const float* x, int head_dim) {
  constexpr float kSmallestAmax = kE2M1Max * 0x1p-126f;
  for (int block = 0; block < head_dim / kMxfp4BlockSize; ++block) {
    const float* in = x + block * kMxfp4BlockSize;
    const uint8_t byte =
        ue8m0_ceil(std::max(row_amax(in, kMxfp4BlockSize), kSmallestAmax) / kE2M1Max);
    scales[block] = byte;
    const float scale = ue8m0_to_float(byte);
    uint8_t* out = values + block * kMxfp4BlockSize / 2;
    for (int i = 0; i < kMxfp4BlockSize; i += 2) {
      out[i / 2] = static_cast<uint8_t>(float_to_e2m1(in[i] / scale) |
                                        float_to_e2m1(in[i + 1] / scale) << 4);
    }
  }
}

void quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                    int threads) {
  const int64_t rows = input.shape[0];
  const int head_dim = static_cast<int>(input.shape[1]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float row[kMaxHeadDim];
    load_floats(row, input, r * input.stride[0], head_dim);
    quantize_k_fp8_row(element<uint8_t>(values, r, 0), element<float>(scales, r), row, head_dim);
  }
}

void dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                      int threads) {
  const int64_t rows = values.shape[0];
  const int head_dim = static_cast<int>(values.shape[1]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float* row = element<float>(out, r, 0);
    decode_fp8_row(row, element<uint8_t>(values, r, 0), head_dim);
    const float scale = *element<float>(scales, r);
    for (int d = 0; d < head_dim; ++d) row[d] *= scale;
  }
}

void quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                    int threads) {
  const int64_t rows = outer_rows(input);
  const int head_dim = static_cast<int>(input.shape[input.rank - 1]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    float row[kMaxHeadDim];
    load_floats(row, input, row_offset(input, r), head_dim);
    quantize_mxfp4_row(values.ptr<uint8_t>() + row_offset(values, r),
                       scales.ptr<uint8_t>() + row_offset(scales, r), row, head_dim);
  }
}

void dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                      int threads) {
  const int64_t rows = outer_rows(out);
  const int head_dim = static_cast<int>(out.shape[out.rank - 1]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    decode_mxfp4_row(out.ptr<float>() + row_offset(out, r),
                     values.ptr<uint8_t>() + row_offset(values, r),
                     scales.ptr<uint8_t>() + row_offset(scales, r), head_dim);
  }
}

}  // namespace flashindexer::cpu
