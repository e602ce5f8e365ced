// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring at H = 64: N = next_n x 64 for next_n 1..4.
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_scoring/store_epilogue.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 64, true, StoreEpilogue>(const ScoreMaps&, const ScoreParams&,
                                                               const StoreEpilogue::Params&, int,
                                                               cudaStream_t);
template cudaError_t launch_score<64, 128, true, StoreEpilogue>(const ScoreMaps&,
                                                                const ScoreParams&,
                                                                const StoreEpilogue::Params&, int,
                                                                cudaStream_t);
template cudaError_t launch_score<64, 192, true, StoreEpilogue>(const ScoreMaps&,
                                                                const ScoreParams&,
                                                                const StoreEpilogue::Params&, int,
                                                                cudaStream_t);
template cudaError_t launch_score<64, 256, true, StoreEpilogue>(const ScoreMaps&,
                                                                const ScoreParams&,
                                                                const StoreEpilogue::Params&, int,
                                                                cudaStream_t);

}  // namespace flashindexer::cuda::scoring
