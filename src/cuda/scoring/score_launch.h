// Internal interface between the scoring launch code and its kernel instantiations.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/scoring/score_params.h"

namespace flashindexer::cuda::scoring {

// The four TMA descriptors of one launch (see score_kernel.cuh for their shapes).
struct ScoreMaps {
  CUtensorMap q;       // e4m3 [T, H, 128], box [rows_per_group, H, 128], 128B swizzle
  CUtensorMap w;       // f32 [T, H], box [rows_per_group, H]
  CUtensorMap keys;    // e4m3 [N, 128] box [64, 128] (prefill) or [pages, page, 128] (paged)
  CUtensorMap scales;  // f32 [N] box [64] (prefill) or [pages, page] (paged)
};

// One instantiation per (H, N = rows per Q tile x H, paged, emit: candidate emission instead of
// stores); defined in score_*.cu.
template <int kHeads, int kN, bool kPaged, bool kEmit>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params, int grid,
                         cudaStream_t stream);
using Launcher = cudaError_t (*)(const ScoreMaps&, const ScoreParams&, int, cudaStream_t);

// Writes -inf at the columns of each row outside its visible range (clean logits).
cudaError_t launch_fill_invisible(const ScoreParams& params, bool paged, cudaStream_t stream);

}  // namespace flashindexer::cuda::scoring
