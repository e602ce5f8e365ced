// Defines launch_score<H, N, paged, emit>; each score_*.cu instantiates a few, so they build in
// parallel.
#pragma once

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/scoring/score_kernel.cuh"
#include "cuda/scoring/score_launch.h"

namespace flashindexer::cuda::scoring {

template <int kHeads, int kN, bool kPaged, bool kEmit>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params, int grid,
                         cudaStream_t stream) {
  constexpr int kSharedBytes = SharedLayout<kHeads, kN, kEmit, kPaged>::kBytes;
  auto* kernel = &score_kernel<kHeads, kN, kPaged, kEmit>;
  // Set on every launch (host-side, capture-safe): a cached "done" flag would be one symbol for
  // every copy of the library in a process (templates' statics are merged process-wide), and
  // a second copy's kernels would then launch without their opt-in.
  const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(kernel, dim3(grid), dim3(kThreads), kSharedBytes, stream, 0, maps.q,
                          maps.w, maps.keys, maps.scales, params);
}

}  // namespace flashindexer::cuda::scoring
