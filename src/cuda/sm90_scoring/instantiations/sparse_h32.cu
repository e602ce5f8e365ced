// SPDX-License-Identifier: Apache-2.0
// Sparse scoring at H = 32 (format_sparse.cuh): one query row per work item (N = 32), blocks of 8
// or 16 keys, from the packed workspace or the paged cache.
#include "cuda/sm90_scoring/format_sparse.cuh"
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_scoring/store_epilogue.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<32, 32, true, StoreEpilogue, SparseKeysE4M3<8, false>>(
    const ScoreMaps&, const ScoreParams&, const StoreEpilogue::Params&, int, cudaStream_t);
template cudaError_t launch_score<32, 32, true, StoreEpilogue, SparseKeysE4M3<16, false>>(
    const ScoreMaps&, const ScoreParams&, const StoreEpilogue::Params&, int, cudaStream_t);
template cudaError_t launch_score<32, 32, true, StoreEpilogue, SparseKeysE4M3<8, true>>(
    const ScoreMaps&, const ScoreParams&, const StoreEpilogue::Params&, int, cudaStream_t);
template cudaError_t launch_score<32, 32, true, StoreEpilogue, SparseKeysE4M3<16, true>>(
    const ScoreMaps&, const ScoreParams&, const StoreEpilogue::Params&, int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
