// SPDX-License-Identifier: Apache-2.0
// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 64.
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_fused/emit_epilogue.cuh"

namespace flashindexer::cuda::scoring {

using fused::EmitEpilogue;

template cudaError_t launch_score<64, 64, true, EmitEpilogue, KeysE4M3>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysE4M3>::type&, int, cudaStream_t);
template cudaError_t launch_score<64, 128, true, EmitEpilogue, KeysE4M3>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysE4M3>::type&, int, cudaStream_t);
template cudaError_t launch_score<64, 192, true, EmitEpilogue, KeysE4M3>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysE4M3>::type&, int, cudaStream_t);
template cudaError_t launch_score<64, 256, true, EmitEpilogue, KeysE4M3>(
    const ScoreMaps&, const ScoreParams&, const EmitEpilogue::Params&,
    const FormatParamsOf<KeysE4M3>::type&, int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
