// SPDX-License-Identifier: Apache-2.0
// Sparse scoring at H = 32 (format_sparse.cuh): one query row per work item (N = 32), blocks of 8
// or 16 keys, from the packed workspace or the paged cache.
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score_sparse<32, 8, false>(const ScoreMaps&, const ScoreParams&,
                                                       const SparseKeyAddresses&, int,
                                                       cudaStream_t);
template cudaError_t launch_score_sparse<32, 16, false>(const ScoreMaps&, const ScoreParams&,
                                                        const SparseKeyAddresses&, int,
                                                        cudaStream_t);
template cudaError_t launch_score_sparse<32, 8, true>(const ScoreMaps&, const ScoreParams&,
                                                      const SparseKeyAddresses&, int, cudaStream_t);
template cudaError_t launch_score_sparse<32, 16, true>(const ScoreMaps&, const ScoreParams&,
                                                       const SparseKeyAddresses&, int,
                                                       cudaStream_t);

}  // namespace flashindexer::cuda::scoring
