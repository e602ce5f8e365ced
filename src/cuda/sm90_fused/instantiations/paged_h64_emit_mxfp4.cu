// SPDX-License-Identifier: Apache-2.0
// MXFP4 paged decode scoring with candidate emission (the fused indexer's scan) at H = 64:
// N = 64 x next_n.
#include "cuda/sm90_fused/emit_epilogue.cuh"
#include "cuda/sm90_scoring/kernel.cuh"

namespace flashindexer::cuda::scoring {

using fused::EmitEpilogue;

template cudaError_t launch_score_mxfp4<64, 64, true, EmitEpilogue>(const ScoreMaps&,
                                                                    const ScoreParams&,
                                                                    const EmitEpilogue::Params&,
                                                                    const Mxfp4Params&, int,
                                                                    cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 128, true, EmitEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const EmitEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 192, true, EmitEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const EmitEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);
template cudaError_t launch_score_mxfp4<64, 256, true, EmitEpilogue>(const ScoreMaps&,
                                                                     const ScoreParams&,
                                                                     const EmitEpilogue::Params&,
                                                                     const Mxfp4Params&, int,
                                                                     cudaStream_t);

}  // namespace flashindexer::cuda::scoring
