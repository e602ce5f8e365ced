// SPDX-License-Identifier: Apache-2.0
// Rotary position embedding applied before quantization (spec §2.2), shared by the query
// quantizers (query.h) and the cache writer (kcache.h).
//
// The rotation acts on 64 dims of each D-wide vector: the first 64 (V3.2, GLM-5) or the last 64
// (V4, V4.1); the other dims pass through. Row `pos` of the cos/sin cache holds 64 values,
// cos[0..32) then sin[0..32). Pair i (i < 32) of the rotated dims is
//   NeoX:        x0 = dim i,      x1 = dim i + 32
//   interleaved: x0 = dim 2i,     x1 = dim 2i + 1      (GPT-J)
// and becomes r0 = x0 cos_i - x1 sin_i, r1 = x1 cos_i + x0 sin_i, computed in fp32 (each
// product and the sum rounded once) and rounded to bf16 (nearest even) before quantizing, in the
// slots the pair came from. The style is always the caller's: engines disagree on the default.
#pragma once

#include <cstdint>

#include "flashindexer/tensor.h"

namespace flashindexer {

enum class RopeStyle : uint8_t {
  kNone,         // no rotation
  kNeox,         // halves: (i, i + 32)
  kInterleaved,  // GPT-J: (2i, 2i + 1)
};

enum class RopeDims : uint8_t {
  kUnspecified,  // an error when a style is given: the caller must say which dims rotate
  kFirst64,      // dims [0, 64)
  kLast64,       // dims [D - 64, D)
};

inline constexpr int kRopeDims = 64;

const char* rope_style_name(RopeStyle style);

struct RopeOptions {
  RopeStyle style = RopeStyle::kNone;
  RopeDims dims = RopeDims::kUnspecified;
  TensorView cos_sin_cache;  // [P, 64] f32 or bf16, on the device of the data
  // [N] i64 or i32: the position of each row's token (query token t, or key i). Positions outside
  // [0, P) are an error on CPU tensors; on CUDA tensors they cannot be checked without a host
  // synchronisation, and such a row is quantized without rotation.
  TensorView positions;

  bool enabled() const { return style != RopeStyle::kNone; }
};

}  // namespace flashindexer
