// Prefill scoring: 256 (row, head) columns per Q tile (4 rows at H = 64, 8 at H = 32).
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 256, false, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<32, 256, false, false>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
