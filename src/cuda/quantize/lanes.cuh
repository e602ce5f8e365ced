// SPDX-License-Identifier: Apache-2.0
// What the quantizing kernels share: a row of D values is held by a group of D/16 consecutive
// lanes of one warp, sixteen values each (two 16-byte loads of bf16, four of f32), so a row's
// amax is a few shuffles inside its group and every store is one or two vector stores per lane.
// Sixteen values a lane, not eight: what a row costs besides its values (its offsets, its slot,
// its scale) is paid once per lane, so half the lanes a row is half that cost. Rows may be rows
// of a [N, D] view or (token, head) rows of a [T, H, D] view.
//
// The arithmetic is the CPU backend's, operation for operation: amax ignores NaN as std::max
// does, the scale's exponent comes from the float bits as frexp gives it (codes.h), the division
// by a power-of-two scale is the (exact) product with its reciprocal, the reciprocal itself is
// built from the exponent (1 / 2^e is 2^-e, or infinity past the floats as the division rounds
// it), and no multiply is fused with an add (explicit _rn intrinsics), so each result has the
// CPU's bits.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/quantize/codes.h"
#include "cuda/quantize/fast_divide.h"
#include "flashindexer/formats.h"
#include "flashindexer/rope.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::quant {

constexpr int kLaneValues = 16;     // values of a row per lane
constexpr int kBlockThreads = 256;  // 8 warps: enough loads in flight per SM without a loop
using Bf16Bits = uint16_t;          // a bf16 element as its bits

// a / b for non-negative a and positive b: in 32 bits when both fit (a 64-bit division is a
// called subroutine, whose calling convention costs stack and registers in these small kernels).
__device__ __forceinline__ int64_t divide(int64_t a, int64_t b) {
  if (((a | b) >> 31) == 0) return static_cast<uint32_t>(a) / static_cast<uint32_t>(b);
  return a / b;
}

// Flat row r of a [N, D] view (inner = 1) or of a [M, H, D] view (inner = H), as an element
// offset: offset() for any row; at() from the row's (outer, inner) split, which the row kernels
// make once a row for all their views (rows_launch.cuh gives every view of a job the same inner
// dimension).
struct Rows {
  int64_t inner = 1;
  int64_t outer_stride = 0;
  int64_t inner_stride = 0;
  __device__ __forceinline__ int64_t offset(int64_t row) const {
    if (inner == 1) return row * outer_stride;
    const int64_t outer = divide(row, inner);
    return outer * outer_stride + (row - outer * inner) * inner_stride;
  }
  __device__ __forceinline__ int64_t at(uint32_t outer, uint32_t inner_index) const {
    return static_cast<int64_t>(outer) * outer_stride +
           static_cast<int64_t>(inner_index) * inner_stride;
  }
};

inline Rows rows_with(int64_t inner, int64_t outer_stride, int64_t inner_stride) {
  Rows rows;
  rows.inner = inner;
  rows.outer_stride = outer_stride;
  rows.inner_stride = inner_stride;
  return rows;
}

// The rows of a view over all its dimensions but the last (rank 1 to 3).
inline Rows rows_of(const TensorView& view) {
  if (view.rank <= 2) return rows_with(1, view.stride[0], 0);
  return rows_with(view.shape[1], view.stride[0], view.stride[1]);
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

// The row kernels' shuffles name the whole warp: its groups of lanes run together (a warp
// leaves only when all its rows are done), and a mask computed per group costs a convergence
// check at every shuffle.
constexpr unsigned kFullWarp = 0xFFFFFFFFu;

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

// The lane's sixteen values, from 16-byte streaming loads (kVector) or one element at a time.
template <typename In, bool kVector>
__device__ __forceinline__ void load_lane(float (&x)[kLaneValues], const In* p) {
  if constexpr (kVector && std::is_same_v<In, float>) {
#pragma unroll
    for (int v = 0; v < kLaneValues / 4; ++v) {
      const float4 f = __ldcs(reinterpret_cast<const float4*>(p) + v);
      x[4 * v] = f.x, x[4 * v + 1] = f.y, x[4 * v + 2] = f.z, x[4 * v + 3] = f.w;
    }
  } else if constexpr (kVector) {
#pragma unroll
    for (int v = 0; v < kLaneValues / 8; ++v) {
      const uint4 q = __ldcs(reinterpret_cast<const uint4*>(p) + v);
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        x[8 * v + 2 * w] = __uint_as_float(words[w] << 16);
        x[8 * v + 2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < kLaneValues; ++k) x[k] = load_float(p + k);
  }
}

// Four e4m3 codes, the first in the low byte. The instruction rounds to nearest even and
// saturates to +-448; its NaN may carry the input's sign (0xFF) where the CPU writes 0x7F, so
// NaN bytes lose their sign bit.
__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  const uint32_t low = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t high = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  const uint32_t word = low | high << 16;
  // A byte's low seven bits are all ones only for NaN (0x7F, 0xFF): adding 1 to them carries
  // into bit 7 then, and that bit clears the byte's sign. Three instructions a word.
  const uint32_t nan_bits = ((word & 0x7F7F7F7Fu) + 0x01010101u) & 0x80808080u;
  return word & ~nan_bits;
}

__device__ __forceinline__ float pow2(int exponent) {
  return __uint_as_float(codes::pow2_bits(exponent));
}

// 1 / 2^e as the IEEE division gives it, for e in [-149, 127]: 2^-e exactly, or infinity where
// 2^-e is past the largest float (e <= -128, a subnormal scale).
__device__ __forceinline__ float pow2_reciprocal(int exponent) {
  return exponent <= -128 ? __uint_as_float(codes::kInfBits) : pow2(-exponent);
}

// A row's FP8 scale (spec §3.2 / §2.3), 2^ceil(log2(max(amax, floor) / 448)), and its
// reciprocal.
struct Fp8Scale {
  float scale;
  float inverse;
};

__device__ __forceinline__ Fp8Scale fp8_scale_of(float amax, float floor) {
  const float ratio = __fdiv_rn(fmaxf(amax, floor), kE4M3Max);
  const int exponent = codes::ceil_log2(__float_as_uint(ratio));
  return {pow2(exponent), pow2_reciprocal(exponent)};
}

// The scales of a group's kRows rows (1 or 2). Two rows: each computed once, by lane u of the
// pair of lanes 2i, 2i + 1 for row u, and shuffled to the group, so the division and the
// exponent's bit work are per row, not per lane.
template <int kLanes, int kRows>
__device__ __forceinline__ void fp8_group_scales(Fp8Scale (&out)[kRows],
                                                 const float (&x)[kRows][kLaneValues], float floor,
                                                 int lane, unsigned mask) {
  static_assert(kRows == 1 || kRows == 2, "one row, or a pair split between two lanes");
  static_assert(kRows <= kLanes, "a row's scale needs a lane");
  float amax[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) amax[u] = group_max<kLanes>(lane_amax(x[u]), mask);
  if constexpr (kRows == 1) {
    out[0] = fp8_scale_of(amax[0], floor);
  } else {
    const Fp8Scale scale = fp8_scale_of((lane & 1) != 0 ? amax[1] : amax[0], floor);
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      out[u].scale = __shfl_sync(mask, scale.scale, u, kLanes);
      out[u].inverse = __shfl_sync(mask, scale.inverse, u, kLanes);
    }
  }
}

// The lane's sixteen e4m3 codes of x * inverse (x / scale, exactly).
__device__ __forceinline__ uint4 fp8_codes(const float (&x)[kLaneValues], float inverse) {
  float y[kLaneValues];
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) y[k] = __fmul_rn(x[k], inverse);
  return make_uint4(e4m3x4(y[0], y[1], y[2], y[3]), e4m3x4(y[4], y[5], y[6], y[7]),
                    e4m3x4(y[8], y[9], y[10], y[11]), e4m3x4(y[12], y[13], y[14], y[15]));
}

// MXFP4 (spec §3.3): a block of 32 values is held by two lanes.
constexpr int kLanesPerMxfp4Block = kMxfp4BlockSize / kLaneValues;
static_assert(kLanesPerMxfp4Block == 2, "the MXFP4 scale split below pairs two lanes");

__device__ __forceinline__ uint32_t mxfp4_scale_byte(float block_amax) {
  constexpr float kSmallestAmax = kE2M1Max * 0x1p-126f;
  return codes::ue8m0_byte(__float_as_uint(__fdiv_rn(fmaxf(block_amax, kSmallestAmax), kE2M1Max)));
}

// The UE8M0 scale bytes of the lane's block in each of the group's kRows rows (1 or 2): the two
// lanes of a block both hold each row's block amax after one shuffle; with two rows the even
// lane derives row 0's byte, the odd lane row 1's, and they swap.
template <int kRows>
__device__ __forceinline__ void mxfp4_block_bytes(uint32_t (&bytes)[kRows],
                                                  const float (&x)[kRows][kLaneValues], int lane,
                                                  unsigned mask) {
  static_assert(kRows == 1 || kRows == 2, "one row, or a pair split between two lanes");
  float amax[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    amax[u] = group_max<kLanesPerMxfp4Block>(lane_amax(x[u]), mask);
  }
  if constexpr (kRows == 1) {
    bytes[0] = mxfp4_scale_byte(amax[0]);
  } else {
    const bool odd = (lane & 1) != 0;
    const uint32_t mine = mxfp4_scale_byte(odd ? amax[1] : amax[0]);
    const uint32_t other = __shfl_xor_sync(mask, mine, 1);
    bytes[0] = odd ? other : mine;
    bytes[1] = odd ? mine : other;
  }
}

// The lane's sixteen values as E2M1 codes of x / 2^(byte - 127), eight bytes, element 2i in the
// low nibble of byte i.
__device__ __forceinline__ uint2 mxfp4_codes(const float (&x)[kLaneValues], uint32_t byte) {
  const float inverse = pow2(127 - static_cast<int>(byte));  // exact: byte in [0, 254]
  uint32_t words[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) {
    words[k / 8] |= codes::e2m1_code_of(__fmul_rn(x[k], inverse)) << (4 * (k % 8));
  }
  return make_uint2(words[0], words[1]);
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
// Eight bytes: one store on rows aligned to 4 bytes as the MXFP4 views need (an 8-byte store
// needs 8), two 4-byte ones otherwise.
template <bool kVector>
__device__ __forceinline__ void store_2x_u32(uint8_t* p, uint2 words) {
  store_u32<kVector>(p, words.x);
  store_u32<kVector>(p + 4, words.y);
}
// Sixteen bytes on rows aligned to 8 (the FP8 views' condition): two 8-byte stores.
template <bool kVector>
__device__ __forceinline__ void store_2x_u64(uint8_t* p, uint4 words) {
  if constexpr (kVector) {
    reinterpret_cast<uint2*>(p)[0] = make_uint2(words.x, words.y);
    reinterpret_cast<uint2*>(p)[1] = make_uint2(words.z, words.w);
  } else {
    store_2x_u32<false>(p, make_uint2(words.x, words.y));
    store_2x_u32<false>(p + 8, make_uint2(words.z, words.w));
  }
}

// RoPE of spec §2.2 on the lanes of one row (see flashindexer/rope.h).
struct Rope {
  int style = 0;  // a RopeStyle
  int first_dim = 0;
  const void* table = nullptr;  // [rows, 64]
  bool table_bf16 = false;
  bool table_vector = false;  // rows start on 16 bytes: a lane's entries in 16-byte loads
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

// Entries [column, column + kCount) of cos/sin row `position` (kCount 8 or 16; `column` a
// multiple of kCount, so on aligned rows they are one or two 16-byte loads of bf16, two to four
// of f32).
template <int kCount>
__device__ __forceinline__ void rope_entries(float (&out)[kCount], const Rope& rope,
                                             int64_t position, int column) {
  static_assert(kCount % 8 == 0, "whole 16-byte loads");
  const int64_t at = position * rope.table_stride + column;
  if (rope.table_vector && rope.table_bf16) {
    const uint4* p = reinterpret_cast<const uint4*>(static_cast<const Bf16Bits*>(rope.table) + at);
#pragma unroll
    for (int v = 0; v < kCount / 8; ++v) {
      const uint4 q = __ldg(p + v);
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        out[8 * v + 2 * w] = __uint_as_float(words[w] << 16);
        out[8 * v + 2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
      }
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
// for live rows and dead ones alike (the NeoX form exchanges halves between lanes two apart);
// a dead row's position is not read. Tokens of one launch stay below 2^31 (rows_launch.cuh).
template <int kLanes>
__device__ __forceinline__ void apply_rope(float (&x)[kLaneValues], const Rope& rope,
                                           uint32_t token, bool live, int lane, unsigned mask) {
  if (rope.style == static_cast<int>(RopeStyle::kNone)) return;
  const int64_t at = static_cast<int64_t>(token) * rope.positions_stride;
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
