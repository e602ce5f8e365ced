// A diagnostic of the scoring kernel (CMake option FLASHINDEXER_SCORE_TIMELINE, off by default):
// each CTA stamps %globaltimer and clock64 at a few points of its life into a device array, which
// fi_score_timeline_read (score_paged_h64.cu) copies out after a paged H = 64 launch
// (tools/bench/decode_timeline.py). It showed where a decode call's time goes: start-up, and a
// tail in which CTAs with the same number of tiles end up to 25 % apart, the same SMs in every
// call; and, from the waits, that the consumers wait for key tiles an eighth to a third of their
// time while the producers wait for free stages (docs/benchmarks.md). In a default build every
// stamp and wait count compiles to nothing.
#pragma once

#include <cstdint>

namespace flashindexer::cuda::scoring {

// Slots of one CTA's record: the stamps in order of its life, each as %globaltimer (ns) in slot
// s and as clock64 in slot kClockSlots + s; each consumer warpgroup's tile count in kTilesSlot +
// 8 c; the SM the CTA ran on (%smid) in kSmidSlot, so that calls can be compared SM by SM; the
// clock64 cycles each consumer warpgroup c spent waiting for its key tiles, and its cycles in all,
// in kConsumerWaitSlot + 2 c and + 2 c + 1; the same for producer warp w's waits for a free stage
// in kProducerWaitSlot + 2 w and + 2 w + 1.
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
  kSmidSlot = 16,
  kConsumerWaitSlot = 17,  // 17-20
  kProducerWaitSlot = 21,  // 21-28
};
constexpr int kTimelineCtas = 1024;
constexpr int kTimelineSlots = 32;

#ifdef FLASHINDEXER_SCORE_TIMELINE
// One copy per translation unit: only the paged H = 64 one is read out.
static __device__ uint64_t score_timeline[kTimelineCtas * kTimelineSlots];

__device__ __forceinline__ void timeline_stamp(int stamp) {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  if (blockIdx.x < kTimelineCtas) {
    score_timeline[blockIdx.x * kTimelineSlots + stamp] = now;
    score_timeline[blockIdx.x * kTimelineSlots + kClockSlots + stamp] = clock64();
    if (stamp == kStampEntry) {
      uint32_t smid;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
      score_timeline[blockIdx.x * kTimelineSlots + kSmidSlot] = smid;
    }
  }
}
__device__ __forceinline__ void timeline_tiles(int consumer, uint32_t tiles) {
  if (blockIdx.x < kTimelineCtas) {
    score_timeline[blockIdx.x * kTimelineSlots + kTilesSlot + kClockSlots * consumer] = tiles;
  }
}
// One thread's waits: the cycles between each begin() and the end() after it, summed, and the
// cycles since construction, written to the two slots from `slot` by record().
struct TimelineWaits {
  long long start = 0;
  long long waited = 0;
  // (clock64() in a constructor is looked up in nvcc's host pass too, where it is undeclared.)
  __device__ __forceinline__ TimelineWaits() {
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(start));
  }
  __device__ __forceinline__ long long begin() const { return clock64(); }
  __device__ __forceinline__ void end(long long since) { waited += clock64() - since; }
  __device__ __forceinline__ void record(int slot) const {
    if (blockIdx.x < kTimelineCtas) {
      score_timeline[blockIdx.x * kTimelineSlots + slot] = waited;
      score_timeline[blockIdx.x * kTimelineSlots + slot + 1] = clock64() - start;
    }
  }
};
#else
__device__ __forceinline__ void timeline_stamp(int) {}
__device__ __forceinline__ void timeline_tiles(int, uint32_t) {}
struct TimelineWaits {
  __device__ __forceinline__ long long begin() const { return 0; }
  __device__ __forceinline__ void end(long long) {}
  __device__ __forceinline__ void record(int) const {}
};
#endif

}  // namespace flashindexer::cuda::scoring
