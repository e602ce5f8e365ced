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

#ifdef FLASHINDEXER_SCORE_TIMELINE
// The stamps of the last paged H = 64 launch (score_timeline.cuh): kTimelineCtas records of
// kTimelineSlots uint64 each, copied to `host` (at most `bytes`). Returns the cudaError_t.
extern "C" __attribute__((visibility("default"))) int fi_score_timeline_read(void* host,
                                                                             size_t bytes) {
  using flashindexer::cuda::scoring::score_timeline;
  return static_cast<int>(cudaMemcpyFromSymbol(
      host, score_timeline, bytes < sizeof(score_timeline) ? bytes : sizeof(score_timeline)));
}
#endif
