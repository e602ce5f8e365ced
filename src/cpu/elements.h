// SPDX-License-Identifier: Apache-2.0
// Element decoding for the CPU backend: float loads of f32/bf16 views and the FP8 / MXFP4
// formats by table. Element addressing is core/access.h.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "core/access.h"
#include "flashindexer/formats.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cpu {

// Reads n f32 or bf16 elements starting at element offset `offset` into floats.
void load_floats(float* out, const TensorView& view, int64_t offset, int64_t n);

// e4m3 code -> float, and E2M1 code -> float, by table (exact).
const std::array<float, 256>& e4m3_table();
const std::array<float, 16>& e2m1_table();

// Dequantizes one row of D values (FP8: unscaled e4m3 values; MXFP4: values * block scales).
void decode_fp8_row(float* out, const uint8_t* values, int head_dim);
void decode_mxfp4_row(float* out, const uint8_t* values, const uint8_t* scales, int head_dim);
// The same into a column: out[d * out_stride].
void decode_fp8_column(float* out, int64_t out_stride, const uint8_t* values, int head_dim);
void decode_mxfp4_column(float* out, int64_t out_stride, const uint8_t* values,
                         const uint8_t* scales, int head_dim);

}  // namespace flashindexer::cpu
