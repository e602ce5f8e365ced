// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 32.
#include "cuda/sm90_scoring/kernel.cuh"
#include "cuda/sm90_fused/emit_epilogue.cuh"

namespace flashindexer::cuda::fused {

using scoring::launch_score;
using scoring::ScoreMaps;
using scoring::ScoreParams;
using scoring::TileFilter;

template cudaError_t launch_score<32, 32, true, EmitEpilogue>(const ScoreMaps&, const ScoreParams&,
                                          const TileFilter&, const EmitEpilogue::Params&, int,
                                          cudaStream_t);
template cudaError_t launch_score<32, 64, true, EmitEpilogue>(const ScoreMaps&, const ScoreParams&,
                                          const TileFilter&, const EmitEpilogue::Params&, int,
                                          cudaStream_t);
template cudaError_t launch_score<32, 128, true, EmitEpilogue>(const ScoreMaps&, const ScoreParams&,
                                          const TileFilter&, const EmitEpilogue::Params&, int,
                                          cudaStream_t);

}  // namespace flashindexer::cuda::fused
