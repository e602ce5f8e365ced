// Defines launch_score<H, N, paged, emit>; each score_*.cu instantiates a few, so they build in
// parallel.
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda/scoring/score_kernel.cuh"
#include "cuda/scoring/score_launch.h"

namespace flashindexer::cuda::scoring {

template <int kHeads, int kN, bool kPaged, bool kEmit>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params, int grid,
                         cudaStream_t stream) {
  constexpr int kSharedBytes = SharedLayout<kN, kEmit>::kAllocBytes;
  auto* kernel = &score_kernel<kHeads, kN, kPaged, kEmit>;
  // The shared-memory opt-in is per device: set it once for each device this process uses.
  static std::atomic<uint64_t> configured_devices{0};
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) return error;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (configured_devices.load(std::memory_order_acquire) & bit) == 0) {
    const cudaError_t error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
    if (error != cudaSuccess) return error;
    configured_devices.fetch_or(bit, std::memory_order_release);
  }
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(maps.q, maps.w, maps.keys, maps.scales, params);
  return cudaGetLastError();
}

}  // namespace flashindexer::cuda::scoring
