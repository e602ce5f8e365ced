// SPDX-License-Identifier: Apache-2.0
// Sparse MXFP4 scoring at H = 32 (format_mxfp4_sparse.cuh): blocks of 8 or 16 keys from the packed
// workspace (the converting format's arithmetic) or the paged cache (the register format's).
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_sparse_mxfp4<32, 8, false, true>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<32, 16, false, true>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<32, 8, true, false>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<32, 16, true, false>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);

}  // namespace flashindexer::cuda::scoring
