// Defines launch_score<H, N, paged>; each score_*.cu instantiates a few, so they build in parallel.
#pragma once

#include "cuda/scoring/score_kernel.cuh"
#include "cuda/scoring/score_launch.h"

namespace flashindexer::cuda::scoring {

template <int kHeads, int kN, bool kPaged>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params, int grid,
                         cudaStream_t stream) {
  constexpr int kSharedBytes = SharedLayout<kN>::kAllocBytes;
  auto* kernel = &score_kernel<kHeads, kN, kPaged>;
  static const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (configured != cudaSuccess) return configured;
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(maps.q, maps.w, maps.keys, maps.scales, params);
  return cudaGetLastError();
}

}  // namespace flashindexer::cuda::scoring
