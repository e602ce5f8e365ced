// SPDX-License-Identifier: Apache-2.0
// The fused indexer's scores output (IndexerOptions::scores): the score of each selected key of a
// complete row, read from the row's candidates (candidate_scores_kernel.cu) after the select and
// before the fallback lays its logits over them. The fallback's rows take theirs from its logits
// (indexer/selected_scores.h). Host code of the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/params.h"

namespace flashindexer::cuda::fused {

struct CandidateScoresParams {
  // The answers the select wrote (out, the rows' visible ranges, k), as topk::make_params gives.
  topk::Params answer;
  const uint64_t* candidates;  // [rows, capacity] rank keys, counts[r] of them (select.h)
  const int32_t* counts;
  int capacity;
  float* scores;  // [rows, >= k] f32 (out)
  int64_t scores_stride;
};

// One CTA per row. A complete row (the select's test: no key dropped and at least min(k, length)
// candidates): scores[t, i] = the score of the candidate whose index is out[t, i], -inf where
// out[t, i] < 0. An incomplete row is left for the fallback. The score comes from the candidate's
// rank key, which holds the fp32 bits but for -0.0 (kept as +0.0) and NaN (written as 0x7fffffff).
cudaError_t launch_candidate_scores(const CandidateScoresParams& params, int64_t rows,
                                    cudaStream_t stream);

}  // namespace flashindexer::cuda::fused
