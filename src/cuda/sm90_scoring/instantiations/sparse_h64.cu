// SPDX-License-Identifier: Apache-2.0
// Sparse scoring at H = 64 (format_sparse.cuh): one query row per work item (N = 64), blocks of 8
// or 16 keys, from the packed workspace or the paged cache.
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_sparse<64, 8, false>(const ScoreMaps&, const ScoreParams&,
                                                       const SparseKeyAddresses&, int,
                                                       cudaStream_t);
template cudaError_t launch_score_sparse<64, 16, false>(const ScoreMaps&, const ScoreParams&,
                                                        const SparseKeyAddresses&, int,
                                                        cudaStream_t);
template cudaError_t launch_score_sparse<64, 8, true>(const ScoreMaps&, const ScoreParams&,
                                                      const SparseKeyAddresses&, int, cudaStream_t);
template cudaError_t launch_score_sparse<64, 16, true>(const ScoreMaps&, const ScoreParams&,
                                                       const SparseKeyAddresses&, int,
                                                       cudaStream_t);

}  // namespace flashindexer::cuda::scoring
