// SPDX-License-Identifier: Apache-2.0
// A fused source layer's block scores (block_scores_kernel.cu): what the scan folded into each
// block (block_max.cuh) plus the sampled tiles it skipped, as select_candidate_blocks' scores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::fused {

struct BlockScoresParams {
  scoring::ScoreParams ranges;  // the scan's parameters: row ranges
  float* entries = nullptr;     // [rows, pitch]: the scan's entries in, the block scores out
  int64_t pitch = 0;
  int32_t block_size = 0;         // a multiple of kGroupKeys
  int32_t* row_blocks = nullptr;  // [rows] out: each row's block count
  // The sample the gate read ([rows, sample_stride], key tiles t with t % 2^tile_shift == 0
  // side by side), whose tiles the scan skipped; nullptr when every tile was scanned.
  const float* sample = nullptr;
  int64_t sample_stride = 0;
  int32_t tile_shift = 0;
};

// Per row, block b of the row's visible range [lo, hi) (keys lo + b cb on): +inf for the newest
// (b = blocks - 1), else the maximum of its scores with NaN as +inf (-inf if all are -inf), as
// candidates/select.cu computes from the logits, bit for bit up to the sign of a zero maximum
// (which the block order does not see: -0.0 ranks equal to +0.0).
cudaError_t launch_block_scores(const BlockScoresParams& params, int64_t rows, bool paged,
                                cudaStream_t stream);

}  // namespace flashindexer::cuda::fused
