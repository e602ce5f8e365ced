// SPDX-License-Identifier: Apache-2.0
// Sparse MXFP4 scoring at H = 64 (format_mxfp4_sparse.cuh): blocks of 8 or 16 keys from the packed
// workspace (the converting format's arithmetic) or the paged cache (the register format's, or
// the converting format's for the calls that stand for next_n 4's 256-column dense tiles).
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_sparse_mxfp4<64, 8, false, true>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 16, false, true>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 8, true, false>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 16, true, false>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 8, true, true>(const ScoreMaps&,
                                                                  const ScoreParams&,
                                                                  const Mxfp4Params&, int,
                                                                  cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 16, true, true>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);

}  // namespace flashindexer::cuda::scoring
