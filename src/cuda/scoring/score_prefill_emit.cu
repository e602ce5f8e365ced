// Prefill scoring with candidate emission (the fused indexer's scan), H = 64 and 32.
#include "cuda/scoring/score_instance.cuh"

namespace flashindexer::cuda::scoring {

template cudaError_t launch_score<64, 256, false, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);
template cudaError_t launch_score<32, 256, false, true>(const ScoreMaps&, const ScoreParams&,
                                                         int, cudaStream_t);

}  // namespace flashindexer::cuda::scoring
