// SPDX-License-Identifier: Apache-2.0
// CPU RoPE (spec §2.2) and query quantizers (spec §2.3, §2.4): one OpenMP task per token, its
// heads in order. The arithmetic is fp32 with no fused multiply-add (the library's flags), so
// every product and sum is rounded once, as the CUDA kernels do.
#include <algorithm>

#include "core/access.h"
#include "cpu/cpu_ops.h"
#include "cpu/elements.h"

namespace flashindexer::cpu {
namespace {

constexpr int kMaxHeadDim = 128;  // the query quantizers take D 64 or 128 (checked by src/api)
constexpr int kPairs = kRopeDims / 2;

float rounded_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// The f32 or bf16 element at flat offset `offset` of a view.
float load_float(const TensorView& view, int64_t offset) {
  float value;
  load_floats(&value, view, offset, 1);
  return value;
}

}  // namespace

int64_t rope_position(const RopeOptions& rope, int64_t row) {
  return rope.positions.dtype == DType::kI64 ? *element<int64_t>(rope.positions, row)
                                             : *element<int32_t>(rope.positions, row);
}

void apply_rope(float* x, int head_dim, const RopeOptions& rope, int64_t position) {
  float cos_sin[kRopeDims];
  load_floats(cos_sin, rope.cos_sin_cache, position * rope.cos_sin_cache.stride[0], kRopeDims);
  float* rotated = x + (rope.dims == RopeDims::kLast64 ? head_dim - kRopeDims : 0);
  const bool neox = rope.style == RopeStyle::kNeox;
  for (int i = 0; i < kPairs; ++i) {
    float& x0 = neox ? rotated[i] : rotated[2 * i];
    float& x1 = neox ? rotated[i + kPairs] : rotated[2 * i + 1];
    const float c = cos_sin[i];
    const float s = cos_sin[kPairs + i];
    const float r0 = x0 * c - x1 * s;
    const float r1 = x1 * c + x0 * s;
    x0 = rounded_to_bf16(r0);
    x1 = rounded_to_bf16(r1);
  }
}

void quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                        const TensorView& q, const TensorView& weights,
                        const QueryQuantOptions& quant, int threads) {
  const int64_t tokens = q.shape[0];
  const int64_t heads = q.shape[1];
  const int head_dim = static_cast<int>(q.shape[2]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t position = quant.rope.enabled() ? rope_position(quant.rope, t) : 0;
    for (int64_t h = 0; h < heads; ++h) {
      float x[kMaxHeadDim];
      load_floats(x, q, t * q.stride[0] + h * q.stride[1], head_dim);
      if (quant.rope.enabled()) apply_rope(x, head_dim, quant.rope, position);
      float sigma;
      quantize_fp8_row(element<uint8_t>(values, t, h, 0), &sigma, x, head_dim, quant.eps);
      const float w = load_float(weights, t * weights.stride[0] + h * weights.stride[1]);
      *element<float>(weights_out, t, h) = (w * sigma) * quant.weight_scale;
    }
  }
}

void quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                          const TensorView& weights_out, const TensorView& q,
                          const TensorView& weights, const QueryQuantOptions& quant, int threads) {
  const int64_t tokens = q.shape[0];
  const int64_t heads = q.shape[1];
  const int head_dim = static_cast<int>(q.shape[2]);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t position = quant.rope.enabled() ? rope_position(quant.rope, t) : 0;
    for (int64_t h = 0; h < heads; ++h) {
      float x[kMaxHeadDim];
      load_floats(x, q, t * q.stride[0] + h * q.stride[1], head_dim);
      if (quant.rope.enabled()) apply_rope(x, head_dim, quant.rope, position);
      quantize_mxfp4_row(element<uint8_t>(values, t, h, 0), element<uint8_t>(scales, t, h, 0), x,
                         head_dim);
      const float w = load_float(weights, t * weights.stride[0] + h * weights.stride[1]);
      *element<float>(weights_out, t, h) = w * quant.weight_scale;
    }
  }
}

}  // namespace flashindexer::cpu
