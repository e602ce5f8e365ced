// Prefill scoring with candidate emission (the fused indexer's scan), H = 64 and 32.
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_fused/emit_epilogue.cuh"

namespace flashindexer::cuda::fused {

using scoring::launch_score;
using scoring::ScoreMaps;
using scoring::ScoreParams;
using scoring::TileFilter;

template cudaError_t launch_score<64, 256, false, EmitEpilogue>(const ScoreMaps&, const ScoreParams&,
                                          const TileFilter&, const EmitEpilogue::Params&, int,
                                          cudaStream_t);
template cudaError_t launch_score<32, 256, false, EmitEpilogue>(const ScoreMaps&, const ScoreParams&,
                                          const TileFilter&, const EmitEpilogue::Params&, int,
                                          cudaStream_t);

}  // namespace flashindexer::cuda::fused
