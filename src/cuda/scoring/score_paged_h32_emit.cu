// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 32.
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<32, 32, true, true>(const ScoreMaps&, const ScoreParams&, int,
                                                      cudaStream_t);
template cudaError_t launch_score<32, 64, true, true>(const ScoreMaps&, const ScoreParams&, int,
                                                      cudaStream_t);
template cudaError_t launch_score<32, 128, true, true>(const ScoreMaps&, const ScoreParams&, int,
                                                       cudaStream_t);

}  // namespace flashindexer::cuda::scoring
