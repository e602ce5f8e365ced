// SPDX-License-Identifier: Apache-2.0
// Reference RoPE and query quantization, written from the formulas of spec §2.2 - §2.4.
#include "reference/query.h"

#include <algorithm>
#include <cmath>

#include "flashindexer/formats.h"
#include "reference/reference.h"

namespace flashindexer::reference {

void rope(float* x, int head_dim, RopeStyle style, RopeDims dims, const float* cos_sin) {
  const int offset = dims == RopeDims::kLast64 ? head_dim - 64 : 0;
  for (int i = 0; i < 32; ++i) {
    int first;
    int second;
    if (style == RopeStyle::kNeox) {
      first = offset + i;  // x0 = q[0:32], x1 = q[32:64]
      second = offset + 32 + i;
    } else {
      first = offset + 2 * i;  // x0 = q[0, 2, ..., 62], x1 = q[1, 3, ..., 63]
      second = offset + 2 * i + 1;
    }
    const float cos_i = cos_sin[i];
    const float sin_i = cos_sin[32 + i];
    const float x0 = x[first];
    const float x1 = x[second];
    const float product_a = x0 * cos_i;
    const float product_b = x1 * sin_i;
    const float product_c = x1 * cos_i;
    const float product_d = x0 * sin_i;
    x[first] = bf16_to_float(float_to_bf16(product_a - product_b));
    x[second] = bf16_to_float(float_to_bf16(product_c + product_d));
  }
}

float quantize_query_fp8_head(uint8_t* values, const float* x, int head_dim, float w, float eps,
                              float weight_scale) {
  float amax = 0.0f;
  for (int d = 0; d < head_dim; ++d) {
    if (std::fabs(x[d]) > amax) amax = std::fabs(x[d]);
  }
  const float sigma = pow2_ceil(std::max(amax, eps) / kE4M3Max);
  for (int d = 0; d < head_dim; ++d) {
    const float scaled = x[d] / sigma;
    // clamp before the conversion, as the spec writes it (NaN passes through to the encoder)
    const float clamped = scaled > kE4M3Max ? kE4M3Max : (scaled < -kE4M3Max ? -kE4M3Max : scaled);
    values[d] = float_to_e4m3(clamped);
  }
  const float folded = w * sigma;
  return folded * weight_scale;
}

float quantize_query_mxfp4_head(uint8_t* values, uint8_t* scales, const float* x, int head_dim,
                                float w, float weight_scale) {
  quantize_mxfp4_row(values, scales, x, head_dim);
  return w * weight_scale;
}

}  // namespace flashindexer::reference
