// SPDX-License-Identifier: Apache-2.0
// What the quantizing kernels share: a row of D values is held by a group of D/8 consecutive
// lanes of one warp, eight values each (one 16-byte load of bf16, two of f32), so a row's amax is
// a few shuffles inside its group and every store is one vector store per lane. Rows may be
// rows of a [N, D] view or (token, head) rows of a [T, H, D] view.
//
// The arithmetic is the CPU backend's, operation for operation: amax ignores NaN as std::max
// does, the scale's exponent comes from the float bits as frexp gives it (codes.h), the division
// by a power-of-two scale is the (exact) product with its reciprocal, and no multiply is fused
// with an add (explicit _rn intrinsics), so each result has the CPU's bits.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/quantize/codes.h"
#include "flashindexer/formats.h"
#include "flashindexer/rope.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::quant {

constexpr int kLaneValues = 8;      // values of a row per lane
constexpr int kBlockThreads = 256;  // 8 warps: enough loads in flight per SM without a loop
using Bf16Bits = uint16_t;          // a bf16 element as its bits

// a / b for non-negative a and positive b: in 32 bits when both fit (a 64-bit division is a
// called subroutine, whose calling convention costs stack and registers in these small kernels).
__device__ __forceinline__ int64_t divide(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

// Flat row r of a [N, D] view (inner = 1) or of a [M, H, D] view (inner = H), as an element
// offset.
struct Rows {
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;
  __device__ __forceinline__ int64_t offset(int64_t row) const {
    if (inner == 1) return row * outer_stride;
    const int64_t outer = divide(row, inner);
    return outer * outer_stride + (row - outer * inner) * inner_stride;
  }
};

// The rows of a view over all its dimensions but the last (rank 1 to 3).
inline Rows rows_of(const TensorView& view) {
  if (view.rank <= 2) return {1, view.stride[0], 0};
  return {view.shape[1], view.stride[0], view.stride[1]};
}

// Rows of a view: the product of all its dimensions but the last.
inline int64_t outer_rows_of(const TensorView& view) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < view.rank; ++d) rows *= view.shape[d];
  return rows;
}

inline bool aligned(const void* pointer, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % bytes == 0;
}

// Whether a view's rows start on `bytes` boundaries: base and outer strides.
inline bool rows_aligned(const TensorView& view, int64_t bytes) {
  if (!aligned(view.data, bytes)) return false;
  const int64_t element = static_cast<int64_t>(dtype_size(view.dtype));
  for (int d = 0; d + 1 < view.rank; ++d) {
    if ((view.stride[d] * element) % bytes != 0) return false;
  }
  return true;
}

// The lanes of this lane's group, as a shuffle mask.
template <int kLanes>
__device__ __forceinline__ unsigned group_mask() {
  if constexpr (kLanes == 32) {
    return 0xFFFFFFFFu;
  } else {
    const unsigned first = (threadIdx.x & 31u) & ~static_cast<unsigned>(kLanes - 1);
    return ((1u << kLanes) - 1u) << first;
  }
}

template <int kLanes>
__device__ __forceinline__ float group_max(float value, unsigned mask) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(mask, value, offset));
  }
  return value;
}

// fmaxf keeps the non-NaN operand, as std::max(amax, |x|) keeps amax when |x| is NaN.
__device__ __forceinline__ float lane_amax(const float (&x)[kLaneValues]) {
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) amax = fmaxf(amax, fabsf(x[k]));
  return amax;
}

__device__ __forceinline__ float load_float(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_float(const Bf16Bits* p) {
  return __uint_as_float(static_cast<uint32_t>(__ldg(p)) << 16);
}

// The lane's eight values, from 16-byte streaming loads (kVector) or one element at a time.
template <typename In, bool kVector>
__device__ __forceinline__ void load_lane(float (&x)[kLaneValues], const In* p) {
  if constexpr (kVector && std::is_same_v<In, float>) {
    const float4 a = __ldcs(reinterpret_cast<const float4*>(p));
    const float4 b = __ldcs(reinterpret_cast<const float4*>(p) + 1);
    x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
    x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
  } else if constexpr (kVector) {
    const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      x[2 * w] = __uint_as_float(words[w] << 16);
      x[2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int k = 0; k < kLaneValues; ++k) x[k] = load_float(p + k);
  }
}

// Four e4m3 codes, the first in the low byte. The instruction rounds to nearest even and
// saturates to +-448; its NaN may carry the input's sign (0xFF) where the CPU writes 0x7F, and
// 0xFF is no finite code, so those bytes lose their sign bit.
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  const uint32_t low = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t high = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  const uint32_t word = low | high << 16;
  return word & ~(__vcmpeq4(word, 0xFFFFFFFFu) & 0x80808080u);
}

__device__ __forceinline__ float pow2(int exponent) {
  return __uint_as_float(codes::pow2_bits(exponent));
}

// The FP8 scale of a row (spec §3.2 / §2.3): 2^ceil(log2(max(amax, floor) / 448)).
template <int kLanes>
__device__ __forceinline__ float fp8_row_scale(const float (&x)[kLaneValues], float floor,
                                               unsigned mask) {
  const float amax = group_max<kLanes>(lane_amax(x), mask);
  const float ratio = __fdiv_rn(fmaxf(amax, floor), kE4M3Max);
  return pow2(codes::ceil_log2(__float_as_uint(ratio)));
}

// The lane's eight e4m3 codes of x / scale.
__device__ __forceinline__ uint2 fp8_codes(const float (&x)[kLaneValues], float scale) {
  const float inverse = __fdiv_rn(1.0f, scale);  // exact: scale is a power of two
  float y[kLaneValues];
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) y[k] = __fmul_rn(x[k], inverse);
  return make_uint2(e4m3x4(y[0], y[1], y[2], y[3]), e4m3x4(y[4], y[5], y[6], y[7]));
}

// MXFP4 (spec §3.3): the lane's eight values lie in one block of 32, held by four lanes. Returns
// the lane's four packed bytes (element 2i in the low nibble) and sets the block's scale byte.
__device__ __forceinline__ uint32_t mxfp4_codes(const float (&x)[kLaneValues], unsigned mask,
                                                uint32_t* scale_byte) {
  constexpr float kSmallestAmax = kE2M1Max * 0x1p-126f;
  const float amax =
      fmaxf(group_max<kMxfp4BlockSize / kLaneValues>(lane_amax(x), mask), kSmallestAmax);
  const uint32_t byte = codes::ue8m0_byte(__float_as_uint(__fdiv_rn(amax, kE2M1Max)));
  *scale_byte = byte;
  const float inverse = __fdiv_rn(1.0f, pow2(static_cast<int>(byte) - 127));  // exact
  uint32_t word = 0;
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) {
    word |= codes::e2m1_code(__float_as_uint(__fmul_rn(x[k], inverse))) << (4 * k);
  }
  return word;
}

// Stores of a lane's codes: vector stores on aligned rows, else one byte at a time.
template <bool kVector>
__device__ __forceinline__ void store_u32(uint8_t* p, uint32_t word) {
  if constexpr (kVector) {
    *reinterpret_cast<uint32_t*>(p) = word;
  } else {
#pragma unroll
    for (int b = 0; b < 4; ++b) p[b] = static_cast<uint8_t>(word >> (8 * b));
  }
}
template <bool kVector>
__device__ __forceinline__ void store_u64(uint8_t* p, uint2 words) {
  if constexpr (kVector) {
    *reinterpret_cast<uint2*>(p) = words;
  } else {
    store_u32<false>(p, words.x);
    store_u32<false>(p + 4, words.y);
  }
}

// RoPE of spec §2.2 on the lanes of one row (see flashindexer/rope.h).
struct Rope {
  int style = 0;  // a RopeStyle
  int first_dim = 0;
  const void* table = nullptr;  // [rows, 64]
  bool table_bf16 = false;
  bool table_vector = false;  // rows start on 16 bytes: a lane's entries in one or two loads
  int64_t table_rows = 0;
  int64_t table_stride = 0;  // elements
  const void* positions = nullptr;
  bool positions_i64 = false;
  int64_t positions_stride = 1;
};

inline Rope rope_of(const RopeOptions& options, int head_dim) {
  Rope rope;
  rope.style = static_cast<int>(options.style);
  if (!options.enabled()) return rope;
  rope.first_dim = options.dims == RopeDims::kLast64 ? head_dim - kRopeDims : 0;
  rope.table = options.cos_sin_cache.data;
  rope.table_bf16 = options.cos_sin_cache.dtype == DType::kBF16;
  rope.table_rows = options.cos_sin_cache.shape[0];
  rope.table_stride = options.cos_sin_cache.stride[0];
  rope.table_vector = rows_aligned(options.cos_sin_cache, 16);
  rope.positions = options.positions.data;
  rope.positions_i64 = options.positions.dtype == DType::kI64;
  rope.positions_stride = options.positions.stride[0];
  return rope;
}

// Entries [column, column + kCount) of cos/sin row `position` (kCount 4 or 8; `column` a multiple
// of kCount, so on aligned rows they are one or two 16-byte loads, or one 8-byte load).
template <int kCount>
__device__ __forceinline__ void rope_entries(float (&out)[kCount], const Rope& rope,
                                             int64_t position, int column) {
  const int64_t at = position * rope.table_stride + column;
  if (rope.table_vector && rope.table_bf16) {
    const Bf16Bits* p = static_cast<const Bf16Bits*>(rope.table) + at;
    uint32_t words[kCount / 2];
    if constexpr (kCount == 8) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
      words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
      words[0] = v.x, words[1] = v.y;
    }
#pragma unroll
    for (int w = 0; w < kCount / 2; ++w) {
      out[2 * w] = __uint_as_float(words[w] << 16);
      out[2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
    }
  } else if (rope.table_vector) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(rope.table) + at);
#pragma unroll
    for (int v = 0; v < kCount / 4; ++v) {
      const float4 f = __ldg(p + v);
      out[4 * v] = f.x, out[4 * v + 1] = f.y, out[4 * v + 2] = f.z, out[4 * v + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      out[k] = rope.table_bf16 ? load_float(static_cast<const Bf16Bits*>(rope.table) + at + k)
                               : load_float(static_cast<const float*>(rope.table) + at + k);
    }
  }
}

__device__ __forceinline__ float bf16_rounded(float x) {
  return __uint_as_float(codes::bf16_bits(__float_as_uint(x)) << 16);
}

// Rotates the lane's values of row `token`'s vector in place. Every lane of the group calls it,
// for live rows and dead ones alike (the NeoX form exchanges halves between lanes four apart);
// a dead row's position is not read.
template <int kLanes>
__device__ __forceinline__ void apply_rope(float (&x)[kLaneValues], const Rope& rope, int64_t token,
                                           bool live, int lane, unsigned mask) {
  if (rope.style == static_cast<int>(RopeStyle::kNone)) return;
  const int64_t at = token * rope.positions_stride;
  int64_t position = -1;
  if (live) {
    position = rope.positions_i64 ? __ldg(static_cast<const int64_t*>(rope.positions) + at)
                                  : __ldg(static_cast<const int32_t*>(rope.positions) + at);
  }
  const int local = lane * kLaneValues - rope.first_dim;  // first dim of the lane in the rotation
  const bool rotates =
      position >= 0 && position < rope.table_rows && local >= 0 && local < kRopeDims;
  constexpr int kPairs = kRopeDims / 2;
  if (rope.style == static_cast<int>(RopeStyle::kNeox)) {
    float partner[kLaneValues];  // x1 for a lane of the first half, x0 for one of the second
#pragma unroll
    for (int k = 0; k < kLaneValues; ++k)
      partner[k] = __shfl_xor_sync(mask, x[k], kPairs / kLaneValues);
    if (!rotates) return;
    const bool first_half = local < kPairs;
    const int pair = first_half ? local : local - kPairs;
    float c[kLaneValues];
    float s[kLaneValues];
    rope_entries(c, rope, position, pair);
    rope_entries(s, rope, position, kPairs + pair);
#pragma unroll
    for (int k = 0; k < kLaneValues; ++k) {
      const float rotated = first_half
                                ? __fsub_rn(__fmul_rn(x[k], c[k]), __fmul_rn(partner[k], s[k]))
                                : __fadd_rn(__fmul_rn(x[k], c[k]), __fmul_rn(partner[k], s[k]));
      x[k] = bf16_rounded(rotated);
    }
  } else {
    if (!rotates) return;
    constexpr int kLanePairs = kLaneValues / 2;
    float c[kLanePairs];
    float s[kLanePairs];
    rope_entries(c, rope, position, local / 2);
    rope_entries(s, rope, position, kPairs + local / 2);
#pragma unroll
    for (int i = 0; i < kLanePairs; ++i) {
      const float x0 = x[2 * i];
      const float x1 = x[2 * i + 1];
      x[2 * i] = bf16_rounded(__fsub_rn(__fmul_rn(x0, c[i]), __fmul_rn(x1, s[i])));
      x[2 * i + 1] = bf16_rounded(__fadd_rn(__fmul_rn(x1, c[i]), __fmul_rn(x0, s[i])));
    }
  }
}

}  // namespace flashindexer::cuda::quant
