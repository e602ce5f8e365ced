// SPDX-License-Identifier: Apache-2.0
// MXFP4 prefill scoring over packed keys: N = 256 (4 rows at H = 64, 8 at H = 32).
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_mxfp4<64, 256, false, StoreEpilogue>(const ScoreMaps&,
                                                                       const ScoreParams&,
                                                                       const StoreEpilogue::Params&,
                                                                       const Mxfp4Params&, int,
                                                                       cudaStream_t);
template cudaError_t launch_score_mxfp4<32, 256, false, StoreEpilogue>(const ScoreMaps&,
                                                                       const ScoreParams&,
                                                                       const StoreEpilogue::Params&,
                                                                       const Mxfp4Params&, int,
                                                                       cudaStream_t);

}  // namespace flashindexer::cuda::scoring
