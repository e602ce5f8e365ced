// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 32. MXFP4 operands.
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_fused/emit_epilogue.cuh"

namespace flashindexer::cuda::scoring {

using fused::EmitEpilogue;

template cudaError_t launch_score<32, 32, true, EmitEpilogue, KeysMXFP4>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysMXFP4>::type&, int, cudaStream_t);
template cudaError_t launch_score<32, 64, true, EmitEpilogue, KeysMXFP4>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysMXFP4>::type&, int, cudaStream_t);
template cudaError_t launch_score<32, 128, true, EmitEpilogue, KeysMXFP4>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysMXFP4>::type&, int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
