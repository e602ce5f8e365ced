// A diagnostic of the scoring kernel (CMake option FLASHINDEXER_SCORE_TIMELINE, off by default):
// each CTA stamps %globaltimer and clock64 at a few points of its life into a device array, which
// fi_score_timeline_read (score_paged_h64.cu) copies out after a paged H = 64 launch
// (tools/bench/decode_timeline.py). It showed where a decode call's time goes: start-up, and a
// tail in which CTAs with the same number of tiles end up to 25 % apart (docs/benchmarks.md). In
// a default build every stamp compiles to nothing.
#pragma once

#include <cstdint>

namespace flashindexer::cuda::scoring {

// Slots of one CTA's record: the stamps in order of its life, each as %globaltimer (ns) in slot
// s and as clock64 in slot kClockSlots + s; each consumer warpgroup's tile count in kTilesSlot +
// 8 c.
enum TimelineSlot : int {
  kStampEntry = 0,          // thread 0, kernel entry
  kStampReady = 1,          // barriers initialised, the prior grid waited for
  kStampFirstLoad = 2,      // producer warp 0 issued its first key tile copy
  kStampFirstTile = 3,      // consumer warpgroup 0's first tile landed
  kStampConsumer0Done = 4,  // consumer warpgroups 0 and 1 left their last item
  kStampConsumer1Done = 5,
  kStampProducerDone = 6,  // producer warp 0 issued its last copy
  kTilesSlot = 7,
  kClockSlots = 8,
};
constexpr int kTimelineCtas = 1024;
constexpr int kTimelineSlots = 16;

#ifdef FLASHINDEXER_SCORE_TIMELINE
// One copy per translation unit: only the paged H = 64 one is read out.
static __device__ uint64_t score_timeline[kTimelineCtas * kTimelineSlots];

__device__ __forceinline__ void timeline_stamp(int stamp) {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  if (blockIdx.x < kTimelineCtas) {
    score_timeline[blockIdx.x * kTimelineSlots + stamp] = now;
    score_timeline[blockIdx.x * kTimelineSlots + kClockSlots + stamp] = clock64();
  }
}
__device__ __forceinline__ void timeline_tiles(int consumer, uint32_t tiles) {
  if (blockIdx.x < kTimelineCtas) {
    score_timeline[blockIdx.x * kTimelineSlots + kTilesSlot + kClockSlots * consumer] = tiles;
  }
}
#else
__device__ __forceinline__ void timeline_stamp(int) {}
__device__ __forceinline__ void timeline_tiles(int, uint32_t) {}
#endif

}  // namespace flashindexer::cuda::scoring
