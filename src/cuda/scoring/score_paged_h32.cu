// Paged decode scoring at H = 32: N = 64 for next_n 1..2, 128 for next_n 3..4 (the unused
// columns of a short Q tile are computed and dropped: decode is bound by reading the keys).
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<32, 64, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<32, 128, true, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
