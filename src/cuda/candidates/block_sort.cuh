// SPDX-License-Identifier: Apache-2.0
// One CTA's ascending sort of a power-of-two count of int32 keys in shared memory (bitonic), and
// its exclusive prefix sum of one count per thread: what the per-row candidate kernels need for
// rows of at most 8192 entries (C <= 4096 candidates, x2 sparse blocks each).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/warp_scan.cuh"

namespace flashindexer::cuda::candidates {

// Sorts keys[0, n) ascending; n a power of two; every thread of the CTA calls it.
__device__ __forceinline__ void block_sort_ascending(int32_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        // Pair (lo, lo + stride) of the i-th comparison of this step.
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool ascending = (lo & size) == 0;
        const int32_t a = keys[lo];
        const int32_t b = keys[hi];
        if ((a > b) == ascending) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
    }
  }
  __syncthreads();
}

// The sum of `value` over threads 0 .. this thread - 1; `warp_sums` holds 32 ints of shared
// memory. Every thread of the CTA (a multiple of 32 threads) calls it.
__device__ __forceinline__ int block_exclusive_scan(int value, int* warp_sums) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int inclusive = warp_inclusive_scan(value);
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    const int sum = lane < warps ? warp_sums[lane] : 0;
    const int scanned = warp_inclusive_scan(sum);
    if (lane < warps) warp_sums[lane] = scanned - sum;
  }
  __syncthreads();
  const int result = warp_sums[warp] + inclusive - value;
  __syncthreads();
  return result;
}

}  // namespace flashindexer::cuda::candidates
