// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 64.
#include "cuda/sm90_fused/emit_epilogue.cuh"
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda {

using fused::EmitEpilogue;

template cudaError_t scoring::launch_score<64, 64, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                       const scoring::ScoreParams&,
                                                                       const EmitEpilogue::Params&,
                                                                       int, cudaStream_t);
template cudaError_t scoring::launch_score<64, 128, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                        const scoring::ScoreParams&,
                                                                        const EmitEpilogue::Params&,
                                                                        int, cudaStream_t);
template cudaError_t scoring::launch_score<64, 192, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                        const scoring::ScoreParams&,
                                                                        const EmitEpilogue::Params&,
                                                                        int, cudaStream_t);
template cudaError_t scoring::launch_score<64, 256, true, EmitEpilogue>(const scoring::ScoreMaps&,
                                                                        const scoring::ScoreParams&,
                                                                        const EmitEpilogue::Params&,
                                                                        int, cudaStream_t);

}  // namespace flashindexer::cuda
