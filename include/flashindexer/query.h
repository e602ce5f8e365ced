// SPDX-License-Identifier: Apache-2.0
// Query quantization (spec §2.3, §2.4), optionally fused with RoPE (rope.h): the step between
// the query projection and the scoring, in the form the indexer ops take.
#pragma once

#include "flashindexer/rope.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

struct QueryQuantOptions {
  // eps_q of spec §2.3: the floor of a head's amax before its scale is derived. No default:
  // 1e-10 in DeepSeek-V3.2's kernel, 1e-4 in V4's. Must be positive (FP8 form only).
  float eps = 0.0f;
  // The factor folded into every weight, D^-1/2 * H^-1/2 of spec §2.1. 0 = that value, computed
  // in double and rounded once to fp32.
  float weight_scale = 0.0f;
  RopeOptions rope;  // positions: [T] (one per token)
};

// FP8 form, per (token t, head h), on the (RoPE'd, bf16-rounded where rotated) values x:
//   sigma    = 2^ceil(log2(max(amax_d |x[t,h,d]|, eps) / 448))
//   values   = e4m3(x[t,h,:] / sigma)          (nearest even, saturating)
//   weights_out[t,h] = (weights[t,h] * sigma) * weight_scale     (two fp32 products)
// values: [T, H, D] e4m3 (out); weights_out: [T, H] f32 (out; may alias weights when weights is
// f32 with the same strides); q: [T, H, D] f32 or bf16, D 64 or 128; weights: [T, H] f32 or bf16.
Status quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                          const TensorView& q, const TensorView& weights,
                          const QueryQuantOptions& quant, const RunOptions& options = {});

// MXFP4 form: each head quantized as quantize_mxfp4 does (blocks of 32, UE8M0 scales); the
// weights are not q-scaled: weights_out[t,h] = weights[t,h] * weight_scale. `quant.eps` is not
// read.
// values: [T, H, D/2] e2m1x2 (out); scales: [T, H, D/32] ue8m0 (out); others as above.
Status quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                            const TensorView& weights_out, const TensorView& q,
                            const TensorView& weights, const QueryQuantOptions& quant,
                            const RunOptions& options = {});

// The weight_scale a QueryQuantOptions of 0 stands for: fp32(1 / sqrt(D * H)).
float default_query_weight_scale(int head_dim, int heads);

}  // namespace flashindexer
