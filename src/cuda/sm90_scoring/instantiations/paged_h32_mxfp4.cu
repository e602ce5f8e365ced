// SPDX-License-Identifier: Apache-2.0
// MXFP4 paged decode scoring at H = 32: N = 32, 64 for next_n 1, 2 and 128 for next_n 3, 4.
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_mxfp4<32, 32, true, StoreEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const StoreEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);
template cudaError_t launch_score_mxfp4<32, 64, true, StoreEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const StoreEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);
template cudaError_t launch_score_mxfp4<32, 128, true, StoreEpilogue>(const ScoreMaps&,
                                                                      const ScoreParams&,
                                                                      const StoreEpilogue::Params&,
                                                                      const Mxfp4Params&, int,
                                                                      cudaStream_t);

}  // namespace flashindexer::cuda::scoring
