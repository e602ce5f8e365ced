// SPDX-License-Identifier: Apache-2.0
// Reference quantizers and dequantizers, one row at a time (spec §3.2, §3.3).
#include <algorithm>
#include <cmath>

#include "flashindexer/formats.h"
#include "reference/reference.h"

namespace flashindexer::reference {

std::vector<double> dequantize_fp8_row(const uint8_t* values, int head_dim, double scale) {
  std::vector<double> row(head_dim);
  for (int d = 0; d < head_dim; ++d) row[d] = static_cast<double>(e4m3_to_float(values[d])) * scale;
  return row;
}

std::vector<double> dequantize_mxfp4_row(const uint8_t* values, const uint8_t* scales,
                                         int head_dim) {
  std::vector<double> row(head_dim);
  for (int d = 0; d < head_dim; ++d) {
    const uint8_t byte = values[d / 2];
    const uint8_t code = (d % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    row[d] = static_cast<double>(e2m1_to_float(code)) *
             static_cast<double>(ue8m0_to_float(scales[d / kMxfp4BlockSize]));
  }
  return row;
}

void quantize_fp8_row(uint8_t* values, float* scale, const float* input, int head_dim) {
  float amax = 0.0f;
  for (int d = 0; d < head_dim; ++d) amax = std::max(amax, std::fabs(input[d]));
  const float row_scale = pow2_ceil(std::max(amax, 1e-4f) / kE4M3Max);
  for (int d = 0; d < head_dim; ++d) values[d] = float_to_e4m3(input[d] / row_scale);
  *scale = row_scale;
}

void quantize_mxfp4_row(uint8_t* values, uint8_t* scales, const float* input, int head_dim) {
  for (int block = 0; block < head_dim / kMxfp4BlockSize; ++block) {
    const float* x = input + block * kMxfp4BlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kMxfp4BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, kE2M1Max * std::ldexp(1.0f, -126));
    const uint8_t byte = ue8m0_ceil(amax / kE2M1Max);
    scales[block] = byte;
    const float scale = ue8m0_to_float(byte);
    for (int i = 0; i < kMxfp4BlockSize; i += 2) {
      const uint8_t low = float_to_e2m1(x[i] / scale);
      const uint8_t high = float_to_e2m1(x[i + 1] / scale);
      values[(block * kMxfp4BlockSize + i) / 2] = static_cast<uint8_t>(low | high << 4);
    }
  }
}

}  // namespace flashindexer::reference
