// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring at H = 32: N = 32 for next_n 1, 64 for next_n 2, 128 for next_n 3..4 (the
// unused columns of a Q tile of three rows are computed and dropped).
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_scoring/store_epilogue.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<32, 32, true, StoreEpilogue>(const ScoreMaps&, const ScoreParams&,
                                                               const StoreEpilogue::Params&, int,
                                                               cudaStream_t);
template cudaError_t launch_score<32, 64, true, StoreEpilogue>(const ScoreMaps&, const ScoreParams&,
                                                               const StoreEpilogue::Params&, int,
                                                               cudaStream_t);
template cudaError_t launch_score<32, 128, true, StoreEpilogue>(const ScoreMaps&,
                                                                const ScoreParams&,
                                                                const StoreEpilogue::Params&, int,
                                                                cudaStream_t);

}  // namespace flashindexer::cuda::scoring
