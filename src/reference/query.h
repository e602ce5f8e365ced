// SPDX-License-Identifier: Apache-2.0
// The oracle of RoPE (spec §2.2) and of the query quantizers (spec §2.3, §2.4): the formulas
// restated one vector at a time, host memory only, no checks.
#pragma once

#include <cstdint>

#include "flashindexer/rope.h"

namespace flashindexer::reference {

// Rotates the 64 dims of x[0, head_dim) that `dims` names by the pairs of `style`, with
// cos_sin = the 64 values of one cos/sin cache row (cos first); each result rounded to bf16.
void rope(float* x, int head_dim, RopeStyle style, RopeDims dims, const float* cos_sin);

// FP8 query head: sigma = 2^ceil(log2(max(amax, eps) / 448)), values = e4m3(clamp(x / sigma)),
// returns the folded weight (w * sigma) * weight_scale.
float quantize_query_fp8_head(uint8_t* values, const float* x, int head_dim, float w, float eps,
                              float weight_scale);

// MXFP4 query head: the values as quantize_mxfp4_row; returns w * weight_scale.
float quantize_query_mxfp4_head(uint8_t* values, uint8_t* scales, const float* x, int head_dim,
                                float w, float weight_scale);

}  // namespace flashindexer::reference
