// SPDX-License-Identifier: Apache-2.0
// What the quantizing kernels share: a row of D values is held by a group of kLanes = D/16
// consecutive lanes of one warp, sixteen values each as two chunks of eight: lane l holds chunks
// l and l + kLanes (its slots 0 and 1; chunk c is the values [8c, 8c + 8)), one 16-byte load of
// bf16 (two of f32) and one store a chunk. So a row's amax is a few shuffles inside its group,
// and the 64 dims that RoPE rotates (8 chunks) fall in one slot of eight lanes when D >= 128, or
// in both slots of every lane when D = 64: every lane rotates the same number of values, where
// a lane holding 16 consecutive values left half of each group idle during the rotation.
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

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/quantize/codes.h"
#include "cuda/quantize/fast_divide.h"
#include "flashindexer/formats.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::quant {

constexpr int kLaneValues = 16;     // values of a row per lane
constexpr int kChunkValues = 8;     // a chunk: half a lane's values, consecutive in the row
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

// The two bf16 values of a word (element 0 in the low half) as floats.
__device__ __forceinline__ void bf16_word_floats(uint32_t word, float* out) {
  out[0] = __uint_as_float(word << 16);
  out[1] = __uint_as_float(word & 0xFFFF0000u);
}

__device__ __forceinline__ float load_float(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_float(const Bf16Bits* p) {
  return __uint_as_float(static_cast<uint32_t>(__ldg(p)) << 16);
}

// The first value of the chunk in `slot` (0 or 1) of `lane` of a group of kLanes lanes.
template <int kLanes>
__device__ __forceinline__ int chunk_first(int lane, int slot) {
  return (lane + slot * kLanes) * kChunkValues;
}

// The lane's sixteen values of `row` (x[8 s + j] is value j of slot s's chunk), from 16-byte
// streaming loads (kVector) or one element at a time.
template <typename In, bool kVector, int kLanes>
__device__ __forceinline__ void load_lane(float (&x)[kLaneValues], const In* row, int lane) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const In* p = row + chunk_first<kLanes>(lane, slot);
    float* v = x + slot * kChunkValues;
    if constexpr (kVector && std::is_same_v<In, float>) {
#pragma unroll
      for (int q = 0; q < kChunkValues / 4; ++q) {
        const float4 f = __ldcs(reinterpret_cast<const float4*>(p) + q);
        v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
      }
    } else if constexpr (kVector) {
      const uint4 q = __ldcs(reinterpret_cast<const uint4*>(p));
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) bf16_word_floats(words[w], v + 2 * w);
    } else {
#pragma unroll
      for (int k = 0; k < kChunkValues; ++k) v[k] = load_float(p + k);
    }
  }
}

// The lane's sixteen bf16 values of `row` as they are loaded (kVector rows): words 4 s .. 4 s + 3
// are slot s's chunk, two values a word (element 0 in the low half).
template <int kLanes>
__device__ __forceinline__ void load_lane_bf16_words(uint32_t (&words)[kLaneValues / 2],
                                                     const Bf16Bits* row, int lane) {
#pragma unroll
  for (int slot = 0; slot < 2; ++slot) {
    const uint4 q = __ldcs(reinterpret_cast<const uint4*>(row + chunk_first<kLanes>(lane, slot)));
    words[4 * slot] = q.x, words[4 * slot + 1] = q.y, words[4 * slot + 2] = q.z;
    words[4 * slot + 3] = q.w;
  }
}

// The amax of slot `slot`'s chunk, and of the lane's sixteen values. fmaxf keeps the non-NaN
// operand, as std::max(amax, |x|) keeps amax when |x| is NaN.
__device__ __forceinline__ float chunk_amax(const float (&x)[kLaneValues], int slot) {
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kChunkValues; ++k) amax = fmaxf(amax, fabsf(x[slot * kChunkValues + k]));
  return amax;
}
__device__ __forceinline__ float lane_amax(const float (&x)[kLaneValues]) {
  float amax = 0.0f;
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) amax = fmaxf(amax, fabsf(x[k]));
  return amax;
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

// The scales of a group's two rows from their lane amaxes: each computed once, by lane u of the
// pair of lanes 2i, 2i + 1 for row u, and shuffled to the group, so the division and the
// exponent's bit work are per row, not per lane.
template <int kLanes>
__device__ __forceinline__ void fp8_group_scales_of(Fp8Scale (&out)[2], const float (&lane_max)[2],
                                                    float floor, int lane, unsigned mask) {
  float amax[2];
#pragma unroll
  for (int u = 0; u < 2; ++u) amax[u] = group_max<kLanes>(lane_max[u], mask);
  const Fp8Scale scale = fp8_scale_of((lane & 1) != 0 ? amax[1] : amax[0], floor);
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    out[u].scale = __shfl_sync(mask, scale.scale, u, kLanes);
    out[u].inverse = __shfl_sync(mask, scale.inverse, u, kLanes);
  }
}
template <int kLanes>
__device__ __forceinline__ void fp8_group_scales(Fp8Scale (&out)[2],
                                                 const float (&x)[2][kLaneValues], float floor,
                                                 int lane, unsigned mask) {
  const float lane_max[2] = {lane_amax(x[0]), lane_amax(x[1])};
  fp8_group_scales_of<kLanes>(out, lane_max, floor, lane, mask);
}

// The lane's sixteen e4m3 codes of x * inverse (x / scale, exactly), from its floats or from its
// bf16 words (widened here, where the codes need them).
__device__ __forceinline__ uint4 fp8_codes(const float (&x)[kLaneValues], float inverse) {
  float y[kLaneValues];
#pragma unroll
  for (int k = 0; k < kLaneValues; ++k) y[k] = __fmul_rn(x[k], inverse);
  return make_uint4(e4m3x4(y[0], y[1], y[2], y[3]), e4m3x4(y[4], y[5], y[6], y[7]),
                    e4m3x4(y[8], y[9], y[10], y[11]), e4m3x4(y[12], y[13], y[14], y[15]));
}
__device__ __forceinline__ uint4 fp8_codes(const uint32_t (&words)[kLaneValues / 2],
                                           float inverse) {
  float x[kLaneValues];
#pragma unroll
  for (int w = 0; w < kLaneValues / 2; ++w) bf16_word_floats(words[w], x + 2 * w);
  return fp8_codes(x, inverse);
}

// MXFP4 (spec §3.3): a block of 32 values is four chunks, chunks [4b, 4b + 4): with D >= 64
// the chunks of slot s on the four lanes 4m..4m + 3 (block m + s * kLanes / 4); with D = 32 (two
// lanes) both slots of both lanes.
static_assert(kMxfp4BlockSize == 4 * kChunkValues, "a block is four chunks");

__device__ __forceinline__ uint32_t mxfp4_scale_byte(float block_amax) {
  return codes::e2m1_scale_byte(__float_as_uint(block_amax));
}

// Lane q of each block's four holds byte (row q / 2, slot q % 2) of the group's two rows: every
// lane of the block gets all four.
__device__ __forceinline__ void share_block_bytes(uint32_t (&bytes)[2][2], uint32_t byte,
                                                  unsigned mask) {
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int s = 0; s < 2; ++s) bytes[u][s] = __shfl_sync(mask, byte, u * 2 + s, 4);
  }
}

// The UE8M0 scale byte of the block of each slot of the group's two rows. The lanes of a block
// all hold its amax after the shuffles; of its four (row, slot) bytes each lane derives one (the
// exponent's bit work once a lane, not once a byte) and the lanes exchange them.
// amax[u][s]: the amax of slot s's chunk of row u on this lane.
template <int kLanes>
__device__ __forceinline__ void mxfp4_block_bytes_of(uint32_t (&bytes)[2][2], float (&amax)[2][2],
                                                     int lane, unsigned mask) {
  if constexpr (kLanes >= 4) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) amax[u][s] = group_max<4>(amax[u][s], mask);
    }
    // Lane q of the block's four derives byte (row q / 2, slot q % 2).
    const int q = lane & 3;
    float mine = (q & 1) != 0 ? amax[0][1] : amax[0][0];
    mine = q == 2 ? amax[1][0] : (q == 3 ? amax[1][1] : mine);
    share_block_bytes(bytes, mxfp4_scale_byte(mine), mask);
  } else {
    static_assert(kLanes == 2, "D = 32: one block a row");
    float row_amax[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) row_amax[u] = group_max<2>(fmaxf(amax[u][0], amax[u][1]), mask);
    const uint32_t byte = mxfp4_scale_byte((lane & 1) != 0 ? row_amax[1] : row_amax[0]);
#pragma unroll
    for (int u = 0; u < 2; ++u) bytes[u][0] = bytes[u][1] = __shfl_sync(mask, byte, u, 2);
  }
}

template <int kLanes>
__device__ __forceinline__ void mxfp4_block_bytes(uint32_t (&bytes)[2][2],
                                                  const float (&x)[2][kLaneValues], int lane,
                                                  unsigned mask) {
  float amax[2][2];
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int s = 0; s < 2; ++s) amax[u][s] = chunk_amax(x[u], s);
  }
  mxfp4_block_bytes_of<kLanes>(bytes, amax, lane, mask);
}

// A bf16 pair in a word (element 0 in the low half) as __nv_bfloat162, and back.
__device__ __forceinline__ __nv_bfloat162 as_bf16x2(uint32_t word) {
  __nv_bfloat162 pair;
  memcpy(&pair, &word, sizeof word);
  return pair;
}
__device__ __forceinline__ uint32_t word_of(__nv_bfloat162 pair) {
  uint32_t word;
  memcpy(&word, &pair, sizeof word);
  return word;
}

// The E2M1 codes (codes::e2m1_code_of) of two bf16 values x times a power of two, in bf16 pairs:
// the codes in the low nibbles of the word's halves. For values with bf16's 8 bits (bf16 input),
// where the kernels' f32 form (codes::e2m1_code_of, about 14 instructions a value) bounded the
// MXFP4 quantizers by their instructions: the scaling is exact in bf16 (a power of two; bf16 has
// f32's exponents), and each step below works on both halves of a word at once (about 6 a value
// in the SASS). Per half, with a = min(|x| 2^-e, 6) and NaN taken as 0 (max keeps the non-NaN
// operand): a's binade 2^k (k clamped to 0..2, as e2m1_code_of) is where the grid's step is
// 2^(k-1), and a + 65 2^k (2^(6+k) and two steps) in bf16, 7 mantissa bits, is a rounded to
// nearest even onto that step (the two steps keep the parity): its mantissa is 2 + the count r
// of steps, below 2^7, with no carry into the exponent. The code r + 2k is the low three bits
// of that sum plus the binade's bits >> 6 (0xFE + 2k). The sign is y = x 2^-e's: x's (the scale
// is positive, and a product that underflows keeps its sign, -0 encoding as the CPU's tiny
// negative products do) unless x is NaN, whose product is the positive canonical NaN (+0, as the
// CPU writes it), so no NaN test is needed for the sign.
__device__ __forceinline__ uint32_t e2m1_pair(uint32_t x_pair, __nv_bfloat162 inverse) {
  const uint32_t y = word_of(__hmul2(as_bf16x2(x_pair), inverse));
  const __nv_bfloat162 a = __hmin2(__hmax2(as_bf16x2(y & 0x7FFF7FFFu), __float2bfloat162_rn(0.0f)),
                                   __float2bfloat162_rn(6.0f));
  const __nv_bfloat162 binade =
      __hmax2(as_bf16x2(word_of(a) & 0x7F807F80u), __float2bfloat162_rn(1.0f));
  const uint32_t sum = word_of(__hfma2(binade, __float2bfloat162_rn(65.0f), a));
  const uint32_t code = (sum + (word_of(binade) >> 6)) & 0x00070007u;
  return code | ((y & 0x80008000u) >> 12);
}

// A chunk's eight E2M1 codes from its values as four bf16 pairs, divided by 2^(byte - 127): a
// word of eight nibbles, element 2i in the low nibble of byte i.
__device__ __forceinline__ uint32_t chunk_codes_of_pairs(const uint32_t* pairs, uint32_t byte) {
  // 2^-127 (byte 254) is a bf16 subnormal: the top half of its float bits, exact too.
  const uint32_t half = __float_as_uint(pow2(127 - static_cast<int>(byte))) >> 16;
  const __nv_bfloat162 inverse_pair = as_bf16x2(half | half << 16);
  uint32_t codes[kChunkValues / 2];
#pragma unroll
  for (int i = 0; i < kChunkValues / 2; ++i) codes[i] = e2m1_pair(pairs[i], inverse_pair);
  // Two pairs' nibbles at bits 0, 8 (their first elements) and 16, 24 (their second): folding
  // the upper ones down by 12 bits gives the two bytes in the low half.
  uint32_t halves[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t both = codes[2 * h] + (codes[2 * h + 1] << 8);
    halves[h] = both | both >> 12;
  }
  return __byte_perm(halves[0], halves[1], 0x5410);
}

// The lane's sixteen values as E2M1 codes, slot s's chunk as x / 2^(byte[s] - 127): a word of
// eight nibbles a slot. kBf16Values: every x is a bf16 value (bf16 input, rotated by RoPE), and
// the codes come two at a time (e2m1_pair).
template <bool kBf16Values>
__device__ __forceinline__ uint2 mxfp4_codes(const float (&x)[kLaneValues],
                                             const uint32_t (&byte)[2]) {
  uint32_t words[2] = {0, 0};
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const float* v = x + s * kChunkValues;
    if constexpr (kBf16Values) {
      uint32_t pairs[kChunkValues / 2];
#pragma unroll
      for (int i = 0; i < kChunkValues / 2; ++i) {
        pairs[i] = __byte_perm(__float_as_uint(v[2 * i]), __float_as_uint(v[2 * i + 1]), 0x7632);
      }
      words[s] = chunk_codes_of_pairs(pairs, byte[s]);
    } else {
      const float inverse = pow2(127 - static_cast<int>(byte[s]));  // exact: byte in [0, 254]
#pragma unroll
      for (int k = 0; k < kChunkValues; ++k) {
        words[s] |= codes::e2m1_code_of(__fmul_rn(v[k], inverse)) << (4 * k);
      }
    }
  }
  return make_uint2(words[0], words[1]);
}

// The bf16 input's forms of chunk_amax and mxfp4_codes, on the loaded words themselves (two
// values a word, element 0 in the low half; words 4 s .. 4 s + 3 are slot s's chunk). The
// quantizers are bound by their ALU instructions (ncu on the H200: the ALU pipe the busiest, the
// issue slots 60-70 % busy), and the float forms spend about three of them a value widening each
// bf16 to a float and packing the pairs again. The values are the same, so are the bits: the
// max of the magnitudes in bf16, whose max keeps the non-NaN operand as fmaxf does, from 0.
// max.xorsign.abs takes the magnitudes itself (the sign it gives is unused): one instruction a
// pair of words where masking both signs first took three.
__device__ __forceinline__ uint32_t max_abs_bf16x2(uint32_t a, uint32_t b) {
  uint32_t m;
  asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(m) : "r"(a), "r"(b));
  return m;
}
// The magnitudes' maximum of a chunk's four words, per half (signs unused).
__device__ __forceinline__ uint32_t chunk_max_abs_bf16(const uint32_t* words) {
  return max_abs_bf16x2(max_abs_bf16x2(words[0], words[1]), max_abs_bf16x2(words[2], words[3]));
}
// The bf16 half of a word (0: low) as a float >= 0: its magnitude, 0 for NaN.
__device__ __forceinline__ float bf16_magnitude(uint32_t word, int half) {
  const uint32_t bits = half == 0 ? word << 16 : word & 0xFFFF0000u;
  return fmaxf(0.0f, fabsf(__uint_as_float(bits)));
}
__device__ __forceinline__ float chunk_amax_bf16(const uint32_t* words) {
  const uint32_t pair = chunk_max_abs_bf16(words);
  return fmaxf(bf16_magnitude(pair, 0), fabsf(__uint_as_float(pair & 0xFFFF0000u)));
}
// Both slots' amaxes of a lane's row in one word, slot s in half s (signs unused): a block's four
// lanes then exchange one word a row, in bf16, where two floats took twice the shuffles and the
// widening of every half first.
__device__ __forceinline__ uint32_t slot_amaxes_bf16(const uint32_t (&words)[kLaneValues / 2]) {
  const uint32_t first = chunk_max_abs_bf16(words);
  const uint32_t second = chunk_max_abs_bf16(words + 4);
  return max_abs_bf16x2(__byte_perm(first, second, 0x5410), __byte_perm(first, second, 0x7632));
}

// mxfp4_block_bytes_of from each row's slot_amaxes_bf16 word (D >= 64: a block is four lanes).
template <int kLanes>
__device__ __forceinline__ void mxfp4_block_bytes_of_words(uint32_t (&bytes)[2][2],
                                                           uint32_t (&amaxes)[2], int lane,
                                                           unsigned mask) {
  static_assert(kLanes >= 4, "a block on four lanes");
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) {
      amaxes[u] = max_abs_bf16x2(amaxes[u], __shfl_xor_sync(mask, amaxes[u], offset));
    }
  }
  // Lane q of the block's four derives byte (row q / 2, slot q % 2).
  const int q = lane & 3;
  share_block_bytes(bytes, mxfp4_scale_byte(bf16_magnitude(q < 2 ? amaxes[0] : amaxes[1], q & 1)),
                    mask);
}

// Where the group's lanes write a row's MXFP4 scale bytes: the first lane of a block's four
// writes its slots' blocks (D = 32: lane 0 the row's one).
template <int kLanes>
__device__ __forceinline__ void store_mxfp4_scales(uint8_t* scales, const uint32_t (&byte)[2],
                                                   int lane) {
  if constexpr (kLanes >= 4) {
    if ((lane & 3) != 0) return;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      scales[chunk_first<kLanes>(lane, s) / kMxfp4BlockSize] = static_cast<uint8_t>(byte[s]);
    }
  } else {
    if (lane == 0) scales[0] = static_cast<uint8_t>(byte[0]);
  }
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
// Eight bytes, on rows aligned to 8 (the FP8 views' condition) one store.
template <bool kVector>
__device__ __forceinline__ void store_u64(uint8_t* p, uint32_t low, uint32_t high) {
  if constexpr (kVector) {
    *reinterpret_cast<uint2*>(p) = make_uint2(low, high);
  } else {
    store_u32<false>(p, low);
    store_u32<false>(p + 4, high);
  }
}
// A lane's sixteen FP8 codes into its two chunks of a row's values.
template <bool kVector, int kLanes>
__device__ __forceinline__ void store_fp8_lane(uint8_t* values, uint4 codes, int lane) {
  store_u64<kVector>(values + chunk_first<kLanes>(lane, 0), codes.x, codes.y);
  store_u64<kVector>(values + chunk_first<kLanes>(lane, 1), codes.z, codes.w);
}
// A lane's sixteen E2M1 codes (half a byte each) into its two chunks of a row's packed values;
// 4-byte stores on rows aligned to 4, as the MXFP4 views need.
template <bool kVector, int kLanes>
__device__ __forceinline__ void store_mxfp4_lane(uint8_t* values, uint2 codes, int lane) {
  store_u32<kVector>(values + chunk_first<kLanes>(lane, 0) / 2, codes.x);
  store_u32<kVector>(values + chunk_first<kLanes>(lane, 1) / 2, codes.y);
}

}  // namespace flashindexer::cuda::quant
