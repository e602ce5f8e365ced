// SPDX-License-Identifier: Apache-2.0
// Prefill scoring: 256 (row, head) columns per Q tile (4 rows at H = 64, 8 at H = 32).
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_scoring/store_epilogue.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 256, false, StoreEpilogue>(const ScoreMaps&,
                                                                 const ScoreParams&,
                                                                 const StoreEpilogue::Params&, int,
                                                                 cudaStream_t);
template cudaError_t launch_score<32, 256, false, StoreEpilogue>(const ScoreMaps&,
                                                                 const ScoreParams&,
                                                                 const StoreEpilogue::Params&, int,
                                                                 cudaStream_t);

}  // namespace flashindexer::cuda::scoring
