// SPDX-License-Identifier: Apache-2.0
// What the top-k's CTAs select from: a row's visible range, its scores as 32-bit score keys
// (fp32 or bf16 patterns), and the CTA-wide scan every step uses to place keys deterministically.
//
// Keys: scores are compared as score keys and rank keys (cuda/common/rank_key.cuh). Rank keys of a
// row are distinct, so the k largest are exactly the reference's set, whatever the algorithm
// that finds them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/params.h"

namespace flashindexer::cuda::topk {

// The keys a row of `visible` keys selects: min(visible, k).
__device__ __forceinline__ uint32_t selected_count(int64_t visible, int k) {
  return static_cast<uint32_t>(visible < k ? visible : static_cast<int64_t>(k));
}

// Scores as stored: fp32, or bf16 bits (the upper half of the fp32 pattern).
template <typename T>
struct Scores;
template <>
struct Scores<float> {
  static constexpr int kPerVector = 4;
  static constexpr int kVectorsPerStep = kFloatVectorsPerStep;
  __device__ __forceinline__ static uint32_t key(const float* row, int64_t i) {
    return score_key(__float_as_uint(__ldg(row + i)));
  }
  __device__ __forceinline__ static uint32_t vector_bits(const uint4& v, int e) {
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
  // A sample group: 4 consecutive keys, one aligned load.
  using Group = uint4;
  __device__ __forceinline__ static void group_keys(const uint4& g, uint32_t (&keys)[4]) {
    keys[0] = score_key(g.x);
    keys[1] = score_key(g.y);
    keys[2] = score_key(g.z);
    keys[3] = score_key(g.w);
  }
};
template <>
struct Scores<uint16_t> {
  static constexpr int kPerVector = 8;
  static constexpr int kVectorsPerStep = kBf16VectorsPerStep;
  __device__ __forceinline__ static uint32_t key(const uint16_t* row, int64_t i) {
    return score_key(static_cast<uint32_t>(__ldg(row + i)) << 16);
  }
  // The fp32 bit pattern of the bf16 value in half h of a 32-bit word (h = 0: the low half).
  __device__ __forceinline__ static uint32_t half_bits(uint32_t word, int h) {
    return h ? (word & 0xffff0000u) : (word << 16);
  }
  __device__ __forceinline__ static uint32_t vector_bits(const uint4& v, int e) {
    const int w = e >> 1;
    return half_bits(w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w, e & 1);
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
  using Group = uint2;
  __device__ __forceinline__ static void group_keys(const uint2& g, uint32_t (&keys)[4]) {
    keys[0] = score_key(half_bits(g.x, 0));
    keys[1] = score_key(half_bits(g.x, 1));
    keys[2] = score_key(half_bits(g.y, 0));
    keys[3] = score_key(half_bits(g.y, 1));
  }
};

// Exclusive prefix of `value` over the CTA in thread order; `total` gets the sum.
// scratch: kWarps + 1 words of shared memory. Contains barriers: call from all threads.
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t value, uint32_t* scratch,
                                                         uint32_t& total) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t inclusive = warp_inclusive_scan(value);
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t sum = lane < kWarps ? scratch[lane] : 0u;
    const uint32_t prefix = warp_inclusive_scan(sum);
    if (lane < kWarps) scratch[lane] = prefix - sum;
    if (lane == kWarps - 1) scratch[kWarps] = prefix;
  }
  __syncthreads();
  const uint32_t result = scratch[warp] + inclusive - value;
  total = scratch[kWarps];
  __syncthreads();
  return result;
}

// Visible range [start, start + count) of a row, clamped to [0, width]: the rule of core/rows.h,
// written out rather than called (routed through it, the cluster kernel grew by 528 instructions
// and every top-k kernel was scheduled anew); the GPU tests compare it with the reference's.
__device__ inline void row_range(const Params& p, int64_t row, int64_t& start, int64_t& count) {
  int64_t begin = 0;
  int64_t end;
  if (p.ks != nullptr) {
    begin = p.ks[row * p.ks_stride];
    end = p.ke[row * p.ke_stride];
  } else if (p.lengths_columns > 0) {
    end = p.lengths[(row / p.lengths_columns) * p.lengths_stride0 +
                    (row % p.lengths_columns) * p.lengths_stride1];
  } else if (p.next_n == 1) {
    end = p.lengths[row * p.lengths_stride0];
  } else {
    end = static_cast<int64_t>(p.lengths[(row / p.next_n) * p.lengths_stride0]) - p.next_n +
          row % p.next_n + 1;
  }
  begin = begin < 0 ? 0 : (begin > p.width ? p.width : begin);
  end = end > p.width ? p.width : end;
  start = begin;
  count = end > begin ? end - begin : 0;
}

}  // namespace flashindexer::cuda::topk
