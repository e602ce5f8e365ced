// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 32.
#include "cuda/sm90_fused/emit_epilogue.cuh"
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda {

using fused::EmitEpilogue;

template cudaError_t scoring::launch_score<32, 32, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                       const scoring::ScoreParams&,
                                                                       const EmitEpilogue::Params&,
                                                                       int, cudaStream_t);
template cudaError_t scoring::launch_score<32, 64, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                       const scoring::ScoreParams&,
                                                                       const EmitEpilogue::Params&,
                                                                       int, cudaStream_t);
template cudaError_t scoring::launch_score<32, 128, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                        const scoring::ScoreParams&,
                                                                        const EmitEpilogue::Params&,
                                                                        int, cudaStream_t);

}  // namespace flashindexer::cuda
