// SPDX-License-Identifier: Apache-2.0
// RoPE (spec §2.2) on the lanes of a quantizing kernel's row, before its quantization: the
// rotated 64 dims are eight chunks, one slot of eight lanes at D >= 128 (the NeoX partner chunk on
// the lane four apart) or both slots of every lane at D = 64 (lanes.cuh has the lane layout). A
// lane's cos / sin entries are loaded once a token (RopeEntries) and rotate each of its rows.
// The products and sums are rounded as the CPU's, and the rotated values to bf16 by one
// conversion a pair, so each value has the CPU's bits.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quantize/lanes.cuh"
#include "flashindexer/rope.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::quant {

// RoPE of spec §2.2 on the lanes of one row (see flashindexer/rope.h).
struct Rope {
  int style = 0;                // a RopeStyle (the kernels take it as a template parameter too)
  int first_chunk = 0;          // the chunk of the first rotated dim (dim / kChunkValues)
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
  rope.first_chunk = (options.dims == RopeDims::kLast64 ? head_dim - kRopeDims : 0) / kChunkValues;
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

// Entries [column, column + kCount) of cos/sin row `position` (kCount 4 or 8; `column` a
// multiple of kCount, so on aligned rows they are one 8- or 16-byte load of bf16, one or two
// 16-byte loads of f32).
template <int kCount>
__device__ __forceinline__ void rope_entries(float* out, const Rope& rope, int64_t position,
                                             int column) {
  static_assert(kCount == 4 || kCount == 8, "half or whole 16-byte loads of bf16");
  const int64_t at = position * rope.table_stride + column;
  if (rope.table_vector && rope.table_bf16) {
    uint32_t words[kCount / 2];
    if constexpr (kCount == 8) {
      const uint4 q =
          __ldg(reinterpret_cast<const uint4*>(static_cast<const Bf16Bits*>(rope.table) + at));
      words[0] = q.x, words[1] = q.y, words[2] = q.z, words[3] = q.w;
    } else {
      const uint2 q =
          __ldg(reinterpret_cast<const uint2*>(static_cast<const Bf16Bits*>(rope.table) + at));
      words[0] = q.x, words[1] = q.y;
    }
#pragma unroll
    for (int w = 0; w < kCount / 2; ++w) bf16_word_floats(words[w], out + 2 * w);
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

// Two rotated values rounded to bf16 (nearest even) by one conversion. Only a NaN's payload can
// differ from the CPU's float_to_bf16 (the instruction writes one NaN), and the quantizers encode
// every NaN alike (e4m3x4, codes::e2m1_code_of, e2m1_pair).
__device__ __forceinline__ void bf16_round_pair(float* pair) {
  bf16_word_floats(word_of(__floats2bfloat162_rn(pair[0], pair[1])), pair);
}

// r0 = x0 c - x1 s, r1 = x1 c + x0 s, each product and the sum rounded once (spec §2.2).
__device__ __forceinline__ float rotated_first(float x0, float x1, float c, float s) {
  return __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
}
__device__ __forceinline__ float rotated_second(float x0, float x1, float c, float s) {
  return __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

// The cos / sin entries one lane's rotated chunks take for one token: loaded once a token, so
// that the rows of one token a group quantizes (the heads of a query) share them.
//   D = 64: every chunk rotates, lane l's are chunks l and l + 4 (NeoX partners of each other):
//     NeoX, both chunks take columns 8 l .. 8 l + 7 (c) and 32 + 8 l .. (s); interleaved, chunk
//     l takes c[0..3] / s[0..3] at 4 l and 32 + 4 l, chunk l + 4 c[4..7] / s[4..7].
//   D >= 128: the rotated chunks are one slot of eight lanes (rope_chunk), chunk r taking
//     c / s at 8 (r % 4) and 32 + 8 (r % 4) (NeoX, s negated for r < 4) or c[0..3] / s[0..3] at
//     4 r, 32 + 4 r.
struct RopeEntries {
  bool rotates = false;  // a row in the table, and (D >= 128) this lane holds a rotated chunk
  float c[kChunkValues];
  float s[kChunkValues];
};

// D >= 128: the slot that holds the rotated dims (uniform over the launch), and the lane's rotated
// chunk r in it (0..7 when the lane rotates).
template <int kLanes>
__device__ __forceinline__ int rope_slot(const Rope& rope) {
  return rope.first_chunk < kLanes ? 0 : 1;
}
template <int kLanes>
__device__ __forceinline__ int rope_chunk(const Rope& rope, int lane) {
  return lane + rope_slot<kLanes>(rope) * kLanes - rope.first_chunk;
}

// The entries of row `token` for this lane. A dead row's position is not read (it rotates
// nothing). Tokens of one launch stay below 2^31 (rows_launch.cuh).
template <int kLanes, RopeStyle kStyle>
__device__ __forceinline__ void load_rope_entries(RopeEntries& e, const Rope& rope, uint32_t token,
                                                  bool live, int lane) {
  static_assert(kLanes >= 4, "RoPE needs D >= 64");
  static_assert(kStyle != RopeStyle::kNone, "a rotating kernel");
  e.rotates = false;
  if (!live) return;
  const int64_t at = static_cast<int64_t>(token) * rope.positions_stride;
  const int64_t position = rope.positions_i64
                               ? __ldg(static_cast<const int64_t*>(rope.positions) + at)
                               : __ldg(static_cast<const int32_t*>(rope.positions) + at);
  if (position < 0 || position >= rope.table_rows) return;
  constexpr bool neox = kStyle == RopeStyle::kNeox;
  if constexpr (kLanes == 4) {
    if constexpr (neox) {
      rope_entries<kChunkValues>(e.c, rope, position, kChunkValues * lane);
      rope_entries<kChunkValues>(e.s, rope, position, kRopeDims / 2 + kChunkValues * lane);
    } else {
      rope_entries<4>(e.c, rope, position, 4 * lane);
      rope_entries<4>(e.s, rope, position, kRopeDims / 2 + 4 * lane);
      rope_entries<4>(e.c + 4, rope, position, 4 * (lane + 4));
      rope_entries<4>(e.s + 4, rope, position, kRopeDims / 2 + 4 * (lane + 4));
    }
  } else {
    const int r = rope_chunk<kLanes>(rope, lane);
    if (r < 0 || r >= kRopeDims / kChunkValues) return;
    if constexpr (neox) {
      rope_entries<kChunkValues>(e.c, rope, position, kChunkValues * (r & 3));
      rope_entries<kChunkValues>(e.s, rope, position, kRopeDims / 2 + kChunkValues * (r & 3));
      // The first half's chunks take -s (neox_values).
#pragma unroll
      for (int j = 0; j < kChunkValues; ++j) e.s[j] = r < 4 ? -e.s[j] : e.s[j];
    } else {
      rope_entries<4>(e.c, rope, position, 4 * r);
      rope_entries<4>(e.s, rope, position, kRopeDims / 2 + 4 * r);
    }
  }
  e.rotates = true;
}

// The rotated values of a chunk v, before their rounding to bf16: the interleaved (GPT-J) form
// with its four pairs' entries c[0..3], s[0..3]; the NeoX form of rotated chunk r with `partner`,
// the chunk r ^ 4 (pair i is dims (i, i + 32): chunks r and r + 4 hold the pairs
// 8 (r % 4) .. 8 (r % 4) + 7).
__device__ __forceinline__ void interleaved_values(float* out, const float* v, const float* c,
                                                   const float* s) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = rotated_first(v[2 * i], v[2 * i + 1], c[i], s[i]);
    out[2 * i + 1] = rotated_second(v[2 * i], v[2 * i + 1], c[i], s[i]);
  }
}
// The NeoX form as one expression for both chunks of a pair: r0 = x0 c - x1 s is x0 c + x1 (-s)
// exactly (a product's sign is its factors', and a - b is a + (-b)), and r1 = x1 c + x0 s, so a
// chunk takes its own values times c plus its partner's times s signed for its half (kNegate: the
// first half, from unsigned entries; D >= 128 signs them once a token, load_rope_entries). One
// form on every lane where the two forms cost the warp both.
template <bool kNegate>
__device__ __forceinline__ void neox_values(float* out, const float* v, const float* partner,
                                            const float* c, const float* s) {
#pragma unroll
  for (int j = 0; j < kChunkValues; ++j) {
    out[j] = __fadd_rn(__fmul_rn(v[j], c[j]), __fmul_rn(partner[j], kNegate ? -s[j] : s[j]));
  }
}

// A chunk of rotated values rounded to bf16 into v (floats) or into its four words (bf16 pairs,
// element 0 in the low half).
__device__ __forceinline__ void round_into(float* v, float* out) {
#pragma unroll
  for (int j = 0; j < kChunkValues; j += 2) bf16_round_pair(out + j);
#pragma unroll
  for (int j = 0; j < kChunkValues; ++j) v[j] = out[j];
}
__device__ __forceinline__ void round_into(uint32_t* words, const float* out) {
#pragma unroll
  for (int i = 0; i < kChunkValues / 2; ++i) {
    words[i] = word_of(__floats2bfloat162_rn(out[2 * i], out[2 * i + 1]));
  }
}

// A lane's values in either form: sixteen floats, or eight words of bf16 pairs (a chunk is four
// words); chunk(values, slot) is slot's chunk, and chunk_floats its eight values as floats.
__device__ __forceinline__ float* chunk(float (&x)[kLaneValues], int slot) {
  return x + slot * kChunkValues;
}
__device__ __forceinline__ uint32_t* chunk(uint32_t (&words)[kLaneValues / 2], int slot) {
  return words + slot * (kChunkValues / 2);
}
__device__ __forceinline__ void chunk_floats(float* v, const float* x) {
#pragma unroll
  for (int j = 0; j < kChunkValues; ++j) v[j] = x[j];
}
__device__ __forceinline__ void chunk_floats(float* v, const uint32_t* words) {
#pragma unroll
  for (int i = 0; i < kChunkValues / 2; ++i) bf16_word_floats(words[i], v + 2 * i);
}

// The chunk of the lane four apart, as floats: exchanged as they are held (eight floats, or four
// words, fewer shuffles and registers).
__device__ __forceinline__ void partner_chunk(float* partner, const float* v, unsigned mask) {
#pragma unroll
  for (int j = 0; j < kChunkValues; ++j) partner[j] = __shfl_xor_sync(mask, v[j], 4);
}
__device__ __forceinline__ void partner_chunk(float* partner, const uint32_t* words,
                                              unsigned mask) {
#pragma unroll
  for (int i = 0; i < kChunkValues / 2; ++i) {
    bf16_word_floats(__shfl_xor_sync(mask, words[i], 4), partner + 2 * i);
  }
}

// D >= 128: the rotated chunks are slot kSlot of eight lanes; the NeoX partner chunk r ^ 4 is on
// the lane four apart. Every lane makes the exchange.
template <int kLanes, int kSlot, RopeStyle kStyle, typename Values>
__device__ __forceinline__ void rotate_slot(Values& x, const Rope& rope, const RopeEntries& e,
                                            int lane, unsigned mask) {
  auto* target = chunk(x, kSlot);
  float v[kChunkValues];
  chunk_floats(v, target);
  float out[kChunkValues];
  if constexpr (kStyle == RopeStyle::kNeox) {
    float partner[kChunkValues];
    partner_chunk(partner, target, mask);
    if (!e.rotates) return;
    neox_values<false>(out, v, partner, e.c, e.s);
  } else {
    if (!e.rotates) return;
    interleaved_values(out, v, e.c, e.s);
  }
  round_into(target, out);
}

// Rotates the lane's values of one row (floats, or bf16 words: the rotated values come out in
// the same form, rounded to bf16) with its token's entries. Every lane of the group calls it,
// for live rows and dead ones alike (the NeoX form exchanges chunks between lanes).
template <int kLanes, RopeStyle kStyle, typename Values>
__device__ __forceinline__ void apply_rope(Values& x, const Rope& rope, const RopeEntries& e,
                                           int lane, unsigned mask) {
  static_assert(kLanes >= 4, "RoPE needs D >= 64");
  if constexpr (kLanes == 4) {
    if (!e.rotates) return;
    float first[kChunkValues], second[kChunkValues], out[kChunkValues];
    chunk_floats(first, chunk(x, 0));
    chunk_floats(second, chunk(x, 1));
    if constexpr (kStyle == RopeStyle::kNeox) {
      neox_values<true>(out, first, second, e.c, e.s);
      round_into(chunk(x, 0), out);
      neox_values<false>(out, second, first, e.c, e.s);
    } else {
      interleaved_values(out, first, e.c, e.s);
      round_into(chunk(x, 0), out);
      interleaved_values(out, second, e.c + 4, e.s + 4);
    }
    round_into(chunk(x, 1), out);
  } else if (rope_slot<kLanes>(rope) == 0) {
    rotate_slot<kLanes, 0, kStyle>(x, rope, e, lane, mask);
  } else {
    rotate_slot<kLanes, 1, kStyle>(x, rope, e, lane, mask);
  }
}

}  // namespace flashindexer::cuda::quant
