// SPDX-License-Identifier: Apache-2.0
// MXFP4 paged decode scoring at H = 64: N = next_n x 64 for next_n 1..4.
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_mxfp4<64, 64, true, StoreEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const StoreEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 128, true, StoreEpilogue>(const ScoreMaps&,
                                                                      const ScoreParams&,
                                                                      const StoreEpilogue::Params&,
                                                                      const Mxfp4Params&, int,
                                                                      cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 192, true, StoreEpilogue>(const ScoreMaps&,
                                                                      const ScoreParams&,
                                                                      const StoreEpilogue::Params&,
                                                                      const Mxfp4Params&, int,
                                                                      cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 256, true, StoreEpilogue>(const ScoreMaps&,
                                                                      const ScoreParams&,
                                                                      const StoreEpilogue::Params&,
                                                                      const Mxfp4Params&, int,
                                                                      cudaStream_t);

}  // namespace flashindexer::cuda::scoring
