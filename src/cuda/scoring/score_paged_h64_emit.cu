// Paged decode scoring with candidate emission (the fused indexer's scan) at H = 64.
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 64, true, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 128, true, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 192, true, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 256, true, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
