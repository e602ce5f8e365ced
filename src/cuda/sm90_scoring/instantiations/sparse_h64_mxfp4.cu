// SPDX-License-Identifier: Apache-2.0
// Sparse MXFP4 scoring at H = 64 (format_mxfp4_sparse.cuh): blocks of 8 or 16 keys from the packed
// workspace (converted by the producer) or the paged cache (converted in the consumers, or by the
// producer for the calls that stand for next_n 4's 256-column dense tiles).
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_sparse_mxfp4<64, 8, false, false>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 16, false, false>(const ScoreMaps&,
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
template cudaError_t launch_score_sparse_mxfp4<64, 8, true, false>(const ScoreMaps&,
                                                                   const ScoreParams&,
                                                                   const Mxfp4Params&, int,
                                                                   cudaStream_t);
template cudaError_t launch_score_sparse_mxfp4<64, 16, true, false>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);

}  // namespace flashindexer::cuda::scoring
