// SPDX-License-Identifier: Apache-2.0
// The warp's inclusive prefix sum, shared by the top-k kernels, the fused indexer's gate and
// emitters, and the decode share walk.
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

}  // namespace flashindexer::cuda
