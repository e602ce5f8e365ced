// SPDX-License-Identifier: Apache-2.0
// Prefill scoring with candidate emission (the fused indexer's scan), H = 64 and 32.
#include "cuda/sm90_fused/emit_epilogue.cuh"
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda {

using fused::EmitEpilogue;

template cudaError_t scoring::launch_score<64, 256, false, EmitEpilogue>(
    const scoring::ScoreMaps&, const scoring::ScoreParams&, const EmitEpilogue::Params&, int,
    cudaStream_t);
template cudaError_t scoring::launch_score<32, 256, false, EmitEpilogue>(
    const scoring::ScoreMaps&, const scoring::ScoreParams&, const EmitEpilogue::Params&, int,
    cudaStream_t);

}  // namespace flashindexer::cuda
