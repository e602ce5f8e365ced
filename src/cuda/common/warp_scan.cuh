// SPDX-License-Identifier: Apache-2.0
// The warp's inclusive prefix sum, shared by the top-k kernels, the fused indexer's gate and
// emitters, and the decode share walk; and the block's, over warp sums, for the planning kernels.
#pragma once

#include <cuda_runtime.h>

namespace flashindexer::cuda {

// The sum of `value` over lanes 0 .. this lane, in lane order. Call from all 32 lanes.
template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T value) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const T other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

// The sum of `value` over threads 0 .. this thread of a block of kThreads (a multiple of 32, at
// most 1024), in thread order, and the block's whole sum in `total`. Call from every thread.
// `warp_totals` is kThreads / 32 entries of shared memory; the call synchronizes the block twice,
// and the caller synchronizes once more before the next call rewrites warp_totals.
template <int kThreads, typename T>
__device__ __forceinline__ T block_inclusive_scan(T value, T* warp_totals, T& total) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one warp of warp sums");
  constexpr int kWarps = kThreads / 32;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const T in_warp = warp_inclusive_scan(value);
  if (lane == 31) warp_totals[warp] = in_warp;
  __syncthreads();
  if (warp == 0) {
    const T scanned = warp_inclusive_scan(lane < kWarps ? warp_totals[lane] : T{});
    if (lane < kWarps) warp_totals[lane] = scanned;  // inclusive over warps 0 .. lane
  }
  __syncthreads();
  total = warp_totals[kWarps - 1];
  return (warp == 0 ? T{} : warp_totals[warp - 1]) + in_warp;
}

}  // namespace flashindexer::cuda
