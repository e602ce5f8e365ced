// SPDX-License-Identifier: Apache-2.0
#include "cpu/elements.h"

#include <cstring>

namespace flashindexer::cpu {

void load_floats(float* out, const TensorView& view, int64_t offset, int64_t n) {
  if (view.dtype == DType::kBF16) {
    const uint16_t* in = static_cast<const uint16_t*>(view.data) + offset;
    for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(in[i]);
  } else {
    std::memcpy(out, static_cast<const float*>(view.data) + offset, n * sizeof(float));
  }
}

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[code] = e4m3_to_float(static_cast<uint8_t>(code));
    return t;
  }();
  return table;
}

const std::array<float, 16>& e2m1_table() {
  static const std::array<float, 16> table = [] {
    std::array<float, 16> t{};
    for (int code = 0; code < 16; ++code) t[code] = e2m1_to_float(static_cast<uint8_t>(code));
    return t;
  }();
  return table;
}

void decode_fp8_row(float* out, const uint8_t* values, int head_dim) {
  const std::array<float, 256>& table = e4m3_table();
  for (int d = 0; d < head_dim; ++d) out[d] = table[values[d]];
}

void decode_mxfp4_row(float* out, const uint8_t* values, const uint8_t* scales, int head_dim) {
  const std::array<float, 16>& table = e2m1_table();
  for (int d = 0; d < head_dim; d += 2) {
    const float scale = ue8m0_to_float(scales[d / kMxfp4BlockSize]);
    out[d] = table[values[d / 2] & 0xF] * scale;
    out[d + 1] = table[values[d / 2] >> 4] * scale;
  }
}

void decode_fp8_column(float* out, int64_t out_stride, const uint8_t* values, int head_dim) {
  const std::array<float, 256>& table = e4m3_table();
  for (int d = 0; d < head_dim; ++d) out[d * out_stride] = table[values[d]];
}

void decode_mxfp4_column(float* out, int64_t out_stride, const uint8_t* values,
                         const uint8_t* scales, int head_dim) {
  const std::array<float, 16>& table = e2m1_table();
  for (int d = 0; d < head_dim; d += 2) {
    const float scale = ue8m0_to_float(scales[d / kMxfp4BlockSize]);
    out[d * out_stride] = table[values[d / 2] & 0xF] * scale;
    out[(d + 1) * out_stride] = table[values[d / 2] >> 4] * scale;
  }
}

}  // namespace flashindexer::cpu
