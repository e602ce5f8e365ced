// Paged decode scoring at H = 64: N = next_n x 64 for next_n 1..4.
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 64, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 128, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 192, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<64, 256, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
