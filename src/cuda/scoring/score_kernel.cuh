// The FP8 scoring kernel for Hopper: logits[row, key] = kscale[key] * sum_h W[row, h] *
// relu(q[row, h, :] . k[key, :]), for prefill (packed keys) and paged decode.
//
// Organisation (one persistent CTA per SM, 384 threads):
//  * Warpgroup 0: the producer. Its warps walk the CTA's work items (ScoreParams: (group,
//    chunk) items in turn for prefill, the CTA's equal share of all key tiles for decode); warp 0
//    publishes each non-empty one in shared memory (ItemInfo) with its Q tile (up to kN x 128 B)
//    and weights; the four warps stream the item's keys by TMA in 64-key tiles
//    (8 KiB + 256 B of scales) through a ring of stages (SharedLayout::kStages, one half per
//    consumer warpgroup, two producer warps per half). Each warp visits only its consumer's
//    steps: the per-tile producer work (block-table lookup, barrier wait, copies) once held
//    decode at 0.79 of copy; the key stream alone now reaches 0.98.
//  * Warpgroups 1 and 2: the consumers. They take alternate steps (one key tile, or two for
//    N <= 128). For one tile: wgmma m64 x kN x k32 (keys are A, the Q tile's (row, head) pairs
//    are B, 4 k-steps; for N = 256 two 128-column groups, so the first group's sums overlap the
//    second's wgmma), then in registers: relu as x + |x| (one FADD, the 1/2 goes into the key
//    scale), times the weight, summed over the thread's heads, times kscale / 2, stored. With 4
//    or 8 rows per tile the Q tile is loaded permuted so that each lane holds every head of its
//    rows (TileColumn); with fewer, a quad reduce-scatter adds the other lanes' heads.
//
// The same kernel samples and emits candidates for the fused indexer (ScoreParams::tile_stride,
// ::gate): the scores it compares are the very values it would store. In the emitting prefill
// scan (kEmitters) producer warps 1-3 are emitters instead of loaders: the consumers store
// their scores to shared memory and the emitters test them (emit_scores).
//
// Determinism: each (row, key) is computed in one fixed order (the wgmma over D, then heads in
// ascending n-block order into four chains combined as (s0 + s2) + (s1 + s3), or into one sum per
// lane followed by the quad reduce-scatter), whatever the schedule, tile or CTA.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/common/wgmma_e4m3.cuh"
#include "cuda/scoring/decode_share.cuh"
#include "cuda/scoring/row_range.cuh"
#include "cuda/scoring/score_params.h"
#include "cuda/scoring/score_timeline.cuh"

namespace flashindexer::cuda::scoring {

constexpr int kTileBytes = kTileKeys * kHeadDim;  // 8 KiB of e4m3 keys
constexpr int kTileScaleBytes = kTileKeys * 4;    // 256 B of fp32 key scales
constexpr int kProducerWarps = 4;  // the producer warpgroup's warps share the per-tile work
static_assert(kProducerWarps == 2 * kConsumerGroups, "two producer warps per consumer warpgroup");
// Who tests the scores against the gate in an emitting instantiation. Prefill: three producer
// warps (emitters), which take the steps in turn and read the consumers' finished scores from
// shared memory (kScoreBuffers per consumer warpgroup); producer warp 0 alone loads both
// warpgroups' tiles. Prefill is bound by the tensor cores, and the test, vote and queue work in
// the consumers' epilogue delayed their next wgmma: the emitting scan took 1.15x (H = 64) and
// 1.2x (H = 32) the storing kernel's time. One emitter per warpgroup kept up at H = 64 but not at
// H = 32, whose tiles (8 rows) have twice the scores for the same tensor-core time; with three,
// fused prefill at H = 32 is 7-16 % faster and H = 64 no slower (H200, docs/benchmarks.md).
// Decode keeps the test in its consumer warps, each with its own queue: it is bound by reading
// the cache, which wants every producer warp loading.
template <int kHeads, bool kEmit, bool kPaged>
inline constexpr bool kEmitters = kEmit && !kPaged;
constexpr int kEmitterWarps = 3;

// Register split (65536 per SM = 128 producer + 256 consumer threads): the paged producer needs
// more for its block-table window, and so do the emitters; the storing prefill consumers need
// more for H = 32 (8 rows of sums), and the emitting ones, without the queue work, do not.
// The CTA only owns the registers it was launched with (168 per thread, the most that 65536 / 384
// rounds down to): a split above that makes the consumers' setmaxnreg.inc wait forever (48 / 232,
// tried for the emission code, hung decode on the H200). At 224 the emitting paged N = 256
// consumer spilled 20-28 bytes until its queue addressing became warp-uniform (CandidateQueue);
// no scoring kernel spills now (tests/cli/check_sass.py).
template <bool kWideProducer>
inline constexpr int kProducerRegisters = kWideProducer ? 56 : 40;
template <bool kWideProducer>
inline constexpr int kConsumerRegisters = kWideProducer ? 224 : 232;
constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
static_assert(128 * kProducerRegisters<true> + 256 * kConsumerRegisters<true> <=
                  kThreads * kLaunchRegisters,
              "paged and emitting register split exceeds the CTA's registers");
static_assert(128 * kProducerRegisters<false> + 256 * kConsumerRegisters<false> <=
                  kThreads * kLaunchRegisters,
              "prefill register split exceeds the CTA's registers");

// One published work item. row0 < 0 ends the CTA's work.
struct ItemInfo {
  int32_t row0;
  int32_t rows;
  int32_t tile_begin;  // the TileWalk of key tiles (64 keys) from tile_begin, below tile_end
  int32_t tile_end;
  int32_t lo[kMaxRowsPerGroup];  // visible keys [lo, hi) of each row (empty: lo == hi)
  int32_t hi[kMaxRowsPerGroup];
};

// Shared memory: as many key stages as fit next to the two Q buffers (more bytes in flight is
// what decode, bound by reading the cache, needs most).
constexpr int kSharedBudget = 220 * 1024;

// Candidate emission: each consumer warp queues its candidates in shared memory and hands them
// to the rows' global slots in bulk (one atomic per row per flush): a global atomic whose result
// a warp waits for costs ~1 us, which per emitting warp step made the scan ~40 % slower. A queue
// that fills within an item is flushed there, and the warp then waits for its atomics while the
// other three warps of its warpgroup wait for it at their next wgmma: with 128 entries an H = 32
// prefill queue (~100 candidates per item and warp) filled about once per item, and fused
// prefill took 1.2x as long (3.95-4.08 -> 3.27-3.41 ms at 2048 x 131072 on the H200). 256
// entries fit in the bytes the stages left over (the same stage count at every N); 512 (two
// stages fewer) measured no faster, nor did a ring that writes each reservation an item later.
constexpr int kQueueEntries = 256;
constexpr int kConsumerWarps = 4 * kConsumerGroups;
constexpr int kQueueMetaWords = 1 + kMaxRowsPerGroup;  // reserved item's row0, rows' places

constexpr int kScoreBuffers = 4;
// Floats per row of a score buffer: the consumer lanes of a quad (rows c, keys k) on distinct banks.
constexpr int kScoreStride = kTileKeys + 8;

// kEmit: the layout of the emitting instantiations (candidate queues, and with emitters the
// score buffers); the storing ones keep those bytes for key stages.
template <int kHeads, int kN, bool kEmit, bool kPaged>
struct SharedLayout {
  static constexpr bool kByEmitters = kEmitters<kHeads, kEmit, kPaged>;
  static constexpr int kQBytes = kN * kHeadDim;
  // The queues: one per consumer warp, or one per emitter with the same bytes.
  static constexpr int kQueues = !kEmit ? 0 : kByEmitters ? kEmitterWarps : kConsumerWarps;
  static constexpr int kQueueCapacity = kQueueEntries * kConsumerWarps / kEmitterWarps;
  static constexpr int kEntriesPerQueue = kByEmitters ? kQueueCapacity : kQueueEntries;
  // Per queue: the queued entries and the reservation (reserve_queue).
  static constexpr int kQueueBytes = (kQueues * (kEntriesPerQueue * 8 + kQueueMetaWords * 4) + 15) /
                                     16 * 16;
  // A score buffer: one tile's scores, a row of kScoreStride floats per query row.
  static constexpr int kScoreBufferBytes = kN / kHeads * kScoreStride * 4;
  static constexpr int kScoreBytes =
      kByEmitters ? kConsumerGroups * kScoreBuffers * kScoreBufferBytes : 0;
  // Score buffers' full and empty barriers.
  static constexpr int kScoreBarriers = kByEmitters ? 2 * kConsumerGroups * kScoreBuffers : 0;
  // Two Q tiles, two weight tiles, two ItemInfos, the candidate queues, the score buffers and
  // the four item barriers; each stage adds its keys, scales and two barriers.
  static constexpr int kFixedBytes = 2 * kQBytes + 2 * kN * 4 +
                                     2 * static_cast<int>(sizeof(ItemInfo)) + kQueueBytes +
                                     kScoreBytes + (4 + kScoreBarriers) * 8;
  // Each consumer warpgroup has its own half of the ring (see produce), so the count is even.
  static constexpr int kStages =
      (kSharedBudget - kFixedBytes) / (kTileBytes + kTileScaleBytes + 16) / 2 * 2;
  static constexpr int kHalfStages = kStages / 2;
  static constexpr int kKeys = 0;
  static constexpr int kQ = kKeys + kStages * kTileBytes;
  static constexpr int kScales = kQ + 2 * kQBytes;
  static constexpr int kWeights = kScales + kStages * kTileScaleBytes;
  static constexpr int kItems = kWeights + 2 * kN * 4;
  static constexpr int kScores = kItems + 2 * static_cast<int>(sizeof(ItemInfo));
  static constexpr int kQueueKeys = kScores + kScoreBytes;
  static constexpr int kQueueMeta = kQueueKeys + kQueues * kEntriesPerQueue * 8;
  static constexpr int kBarriers = kQueueKeys + kQueueBytes;
  // Stages' full and empty, items' full and empty, then the score buffers' full and empty.
  static constexpr int kScoreFull = 2 * kStages + 4;
  static constexpr int kScoreEmpty = kScoreFull + kConsumerGroups * kScoreBuffers;
  static constexpr int kBarrierCount = 2 * kStages + 4 + kScoreBarriers;
  static constexpr int kBytes = kBarriers + kBarrierCount * 8;
  static_assert(kBytes <= kSharedBudget, "shared memory layout over budget");
  static_assert(kBarriers % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kScores % 16 == 0, "the emitters read the score buffers as float4");
};

// The key tiles of a work item, in order: every tile from `begin` (tile_stride 1), the sampled
// ones (t % tile_stride == 0), or all but those (skip_sampled). tile_stride is a power of two,
// so the walk holds nothing but the tile (registers are scarce in the N = 256 consumers).
struct TileWalk {
  int32_t tile;

  __device__ __forceinline__ TileWalk(const ScoreParams& p, int32_t begin) : tile(begin) {
    const int32_t mask = p.tile_stride - 1;
    if (p.skip_sampled) {
      if ((tile & mask) == 0) ++tile;
    } else {
      tile = (tile + mask) & ~mask;
    }
  }
  __device__ __forceinline__ void next(const ScoreParams& p) {
    if (!p.skip_sampled) {
      tile += p.tile_stride;
    } else if ((++tile & (p.tile_stride - 1)) == 0) {
      ++tile;
    }
  }
  // The walk's tile m places after `from` (a tile of the walk). Skipping the sampled tiles, m is
  // at most tile_stride - 2 (the stride is 32 or more), so one sampled tile at most lies between.
  __device__ __forceinline__ static int32_t advance(const ScoreParams& p, int32_t from, int32_t m) {
    if (!p.skip_sampled) return from + (m << p.tile_shift);
    const int32_t to = from + m;
    return to + ((to >> p.tile_shift) - (from >> p.tile_shift));
  }
  // The number of tiles of the walk in [begin, end), begin <= end.
  __device__ __forceinline__ static int32_t count(const ScoreParams& p, int32_t begin,
                                                  int32_t end) {
    const int32_t sampled = ((end - 1) >> p.tile_shift) - ((begin - 1) >> p.tile_shift);
    return p.skip_sampled ? end - begin - sampled : sampled;
  }
};

// A consumer step is kTilesPerStep consecutive key tiles of one item. Small Q tiles (decode)
// take two tiles per step, so each warpgroup keeps two tiles' wgmma and epilogue in flight:
// decode is bound by latency, not by the tensor cores. The emitting N <= 64 scans (fused decode at
// next_n 1 with H = 64, next_n 1-2 with H = 32) take four: its per-step work (barriers, queue
// checks, bookkeeping) then spreads over twice the tiles, and fused decode at 64 x 131072 keys ran
// 5-7 % faster on the H200. The storing N = 64 kernel keeps two: four was no faster there and
// lost 0.5 us at batch 1 (docs/benchmarks.md).
template <int kN, bool kEmit>
inline constexpr int kTilesPerStepFor = kEmit && kN <= 64 ? 4 : (kN <= 128 ? 2 : 1);

// Takes a step's tiles off the walk into tile_of: the next kTilesPerStep, fewer at the end of the
// item; returns how many. Callers hold walk.tile < tile_end. With one tile per step, that tile is
// taken unconditionally, so that the compiler sees the step's epilogue run without divergence
// checks (prefill 456 -> 441 SASS instructions per step); the two-tile steps of decode keep the
// counted form, which measured faster for them (H64 b64 x 131072: 315 against 350 us), and
// with every tile taken (tile_stride 1) count without walking.
template <int kTilesPerStep>
__device__ __forceinline__ int take_step(TileWalk& walk, const ScoreParams& p, int32_t tile_end,
                                         int32_t (&tile_of)[kTilesPerStep]) {
  if constexpr (kTilesPerStep == 1) {
    tile_of[0] = walk.tile;
    walk.next(p);
    return 1;
  } else {
    if (p.tile_stride == 1) {  // every tile: the step is the next kTilesPerStep, no walk
      const int tiles = min(kTilesPerStep, tile_end - walk.tile);
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) tile_of[u] = walk.tile + u;
      walk.tile += tiles;
      return tiles;
    }
    int tiles = 0;
#pragma unroll
    for (int u = 0; u < kTilesPerStep; ++u) {
      tile_of[u] = walk.tile;
      if (walk.tile < tile_end) {
        ++tiles;
        walk.next(p);
      }
    }
    return tiles;
  }
}

// ---- producer -------------------------------------------------------------------------------

// Loads the keys and scales of key tile `tile` of group `group` into one stage. kReadOnce: the
// cache pages are loaded with an L2 evict-first policy (each page is read by one CTA, once per
// call), so that the fused decode scan's candidates stay in L2 for the kernels after it: fused
// decode at batch 64 ran 1-5 % faster on the H200, while the dense pair was 0.3-0.6 % slower
// (docs/benchmarks.md), so only the emitting instantiations use it.
template <bool kPaged, bool kReadOnce>
struct TileLoader {
  const ScoreParams& p;
  const CUtensorMap* key_map;
  const CUtensorMap* scale_map;
  int64_t window_group = -1;  // block-table window: entries [window_page, window_page + 32)
  int32_t window_page = 0;
  int32_t window_entry = 0;  // lane i holds block_table[group, window_page + i]
  uint64_t read_once = kReadOnce ? ptx::l2_evict_first_policy() : 0;

  // Starts loading the window of block-table entries from `page` of request `group`: called as
  // soon as a request's first page is known, its latency overlaps the work item's set-up.
  __device__ __forceinline__ void load_window(int64_t group, int32_t page, int lane) {
    window_group = group;
    window_page = page;
    const int32_t mine = page + lane;
    window_entry = mine < p.table_pages
                       ? p.block_table[group * p.table_stride_b + mine * p.table_stride_p]
                       : -1;
  }

  __device__ __forceinline__ int32_t page_entry(int64_t group, int32_t page, int lane) {
    if (group != window_group || page < window_page || page >= window_page + 32) {
      load_window(group, page, lane);
    }
    return __shfl_sync(0xffffffffu, window_entry, page - window_page);
  }

  // Called by the whole producer warp; lane 0 issues the copies.
  __device__ __forceinline__ void load(int64_t group, int32_t tile, uint8_t* keys, float* scales,
                                       uint64_t* full, int lane) {
    if constexpr (kPaged) {
      // Page sizes are 32, 64 or 128: one copy per tile, two for pages of 32 keys.
      const int rows_per_copy = min(kTileKeys, p.page_size);
      const int copies = p.page_shift < 6 ? 2 : 1;
      // 32-bit shifts, not 64-bit divisions: per-tile producer work once held decode back.
      const int32_t first_key = tile * kTileKeys;
      const int32_t first_page = first_key >> p.page_shift;
      const int32_t row_in_page = first_key & (p.page_size - 1);
      int32_t pages[kTileKeys / 32];
#pragma unroll
      for (int c = 0; c < kTileKeys / 32; ++c) {
        pages[c] = c < copies ? page_entry(group, first_page + c, lane) : 0;
      }
      if (lane == 0) {
        ptx::mbarrier_arrive_expect_tx(full, kTileBytes + kTileScaleBytes);
#pragma unroll
        for (int c = 0; c < kTileKeys / 32; ++c) {
          if (c < copies) {
            uint8_t* dst = keys + c * rows_per_copy * kHeadDim;
            if constexpr (kReadOnce) {
              ptx::tma_load_3d_hinted(dst, key_map, full, 0, row_in_page, pages[c], read_once);
              ptx::tma_load_2d_hinted(scales + c * rows_per_copy, scale_map, full, row_in_page,
                                      pages[c], read_once);
            } else {
              ptx::tma_load_3d(dst, key_map, full, 0, row_in_page, pages[c]);
              ptx::tma_load_2d(scales + c * rows_per_copy, scale_map, full, row_in_page, pages[c]);
            }
          }
        }
      }
    } else {
      if (lane == 0) {
        ptx::mbarrier_arrive_expect_tx(full, kTileBytes + kTileScaleBytes);
        ptx::tma_load_2d(keys, key_map, full, 0, tile * kTileKeys);
        ptx::tma_load_1d(scales, scale_map, full, tile * kTileKeys);
      }
    }
  }
};

// Publishes one work item (producer warp 0): waits until its Q buffer is free, writes the
// ItemInfo and starts the Q tile and weights copies.
template <int kHeads, int kN, bool kPaged, bool kEmit>
__device__ __forceinline__ void publish_item(ItemInfo* items, uint64_t* q_full, uint64_t* q_empty,
                                             uint32_t item_count, const CUtensorMap* q_map,
                                             const CUtensorMap* w_map, uint8_t* smem, int32_t row0,
                                             int rows, int32_t tile_begin, int32_t tile_end,
                                             int32_t lo, int32_t hi, uint32_t q_bytes, int lane) {
  using L = SharedLayout<kHeads, kN, kEmit, kPaged>;
  const int buffer = item_count & 1;
  ptx::mbarrier_wait(&q_empty[buffer], ((item_count >> 1) & 1) ^ 1);
  // Lane 0 writes the whole record, so its release (the arrive below) publishes it.
  ItemInfo& info = items[buffer];
#pragma unroll
  for (int r = 0; r < kMaxRowsPerGroup; ++r) {
    const int32_t row_lo = __shfl_sync(0xffffffffu, lo, r);
    const int32_t row_hi = __shfl_sync(0xffffffffu, hi, r);
    if (lane == 0) {
      info.lo[r] = row_lo;
      info.hi[r] = row_hi;
    }
  }
  if (lane == 0) {
    info.row0 = row0;
    info.rows = rows;
    info.tile_begin = tile_begin;
    info.tile_end = tile_end;
    ptx::mbarrier_arrive_expect_tx(&q_full[buffer], q_bytes);
    uint8_t* q_tile = smem + L::kQ + buffer * L::kQBytes;
    if constexpr (kLaneOwnedRows<kHeads, kN>) {
      // Four rows per copy, in the permuted order of TileColumn: the map's dimensions are (byte,
      // head % 2, row, head / 2), so smem row 8 (head / 2) + 2 (row % 4) + head % 2.
#pragma unroll
      for (int i = 0; i < kN / kHeads / 4; ++i) {
        ptx::tma_load_4d(q_tile + i * 4 * kHeads * kHeadDim, q_map, &q_full[buffer], 0, 0,
                         row0 + 4 * i, 0);
      }
    } else {
      ptx::tma_load_3d(q_tile, q_map, &q_full[buffer], 0, 0, row0);
    }
    ptx::tma_load_2d(smem + L::kWeights + buffer * kN * 4, w_map, &q_full[buffer], 0, row0);
  }
}

// The reading side of publish_item (consumers and emitters): waits until item `item_count` is
// published in its buffer (item_count & 1) and returns it; row0 < 0 ends the CTA's work.
__device__ __forceinline__ const ItemInfo& wait_for_item(const ItemInfo* items, uint64_t* q_full,
                                                         uint32_t item_count) {
  const int buffer = item_count & 1;
  ptx::mbarrier_wait(&q_full[buffer], (item_count >> 1) & 1);
  return items[buffer];
}

// What the rows of one work item see of its keys [key_begin, key_end), over a segment of kWidth
// lanes: lane `at` of the segment holds row row0 + at (if at < rows) and its range [lo, hi), and
// every lane the keys [first, last) that some row sees (first >= last: none); rows with nothing
// visible do not widen them.
template <bool kPaged, int kWidth>
struct ItemKeys {
  int32_t lo = 0;
  int32_t hi = 0;  // an empty range on lanes past the rows
  int32_t first;
  int32_t last;

  __device__ __forceinline__ ItemKeys(const ScoreParams& p, int64_t row0, int rows,
                                      int64_t key_begin, int64_t key_end, int at) {
    if (at < rows) row_range<kPaged>(p, row0 + at, lo, hi);
    first = lo < hi ? static_cast<int32_t>(max(static_cast<int64_t>(lo), key_begin)) : INT32_MAX;
    last = lo < hi ? static_cast<int32_t>(min(static_cast<int64_t>(hi), key_end)) : 0;
#pragma unroll
    for (int offset = kWidth / 2; offset > 0; offset /= 2) {
      first = min(first, __shfl_xor_sync(0xffffffffu, first, offset));
      last = max(last, __shfl_xor_sync(0xffffffffu, last, offset));
    }
  }
  // Whether the walk (TileWalk) has a tile among those keys.
  __device__ __forceinline__ bool any_tile(const ScoreParams& p) const {
    return first < last && TileWalk(p, first / kTileKeys).tile < (last + kTileKeys - 1) / kTileKeys;
  }
};

template <int kHeads, int kN, bool kPaged, bool kEmit>
__device__ __forceinline__ void produce(const ScoreParams& p, const CUtensorMap* q_map,
                                        const CUtensorMap* w_map, const CUtensorMap* key_map,
                                        const CUtensorMap* scale_map, uint8_t* smem) {
  using L = SharedLayout<kHeads, kN, kEmit, kPaged>;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;  // producer warp, 0 .. kProducerWarps - 1
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* full = barriers;
  uint64_t* empty = barriers + L::kStages;
  uint64_t* q_full = barriers + 2 * L::kStages;
  uint64_t* q_empty = q_full + 2;
  ItemInfo* items = reinterpret_cast<ItemInfo*>(smem + L::kItems);

  TileLoader<kPaged, kPaged && kEmit> loader{p, key_map, scale_map};
  // The Q copies bring whole tiles of kN / kHeads rows when the rows are lane-owned (a group of 3
  // decode rows brings a 4th, computed and dropped), rows_per_group rows otherwise.
  const uint32_t q_rows = kLaneOwnedRows<kHeads, kN> ? kN / kHeads : p.rows_per_group;
  const uint32_t q_bytes =
      (q_rows * kHeadDim + static_cast<uint32_t>(p.rows_per_group) * 4) * kHeads;
  constexpr int kTilesPerStep = kTilesPerStepFor<kN, kEmit>;
  // Each consumer warpgroup's tiles go to its own half of the ring, at their place in it: a
  // stage is only ever read by one warpgroup, which reads its tiles in order, so a barrier's
  // parity never stands for two phases. (With one shared ring, a warpgroup running a whole ring
  // ahead of the other -- easy once candidate emission makes epilogues uneven -- would take a
  // stale phase for a fresh one.) Warp 2 c + (place % 2) loads consumer c's tiles, so each
  // warp's tiles of a half ring are two places apart: the empty barrier it waits on is then never
  // two phases behind (its parity would pass a wait one pass early). Taking turns over all tiles
  // did that: with uneven steps a warp could go many places without a tile of one half, run
  // ahead on the other half, and load into a stage whose previous tile had not been consumed.
  // With emitters (one tile per step), warp 0 alone loads both consumers' tiles in step order.
  constexpr bool kOneLoader = kEmitters<kHeads, kEmit, kPaged>;
  const int consumer = warp / 2;  // (a single loader: both)
  TimelineWaits waits;            // (a diagnostic build's; nothing otherwise)
  uint32_t step_count = 0;        // consumer steps so far (as consume counts them)
  uint32_t place = 0;        // tiles given to this warp's consumer (a single loader: consumer 0)
  uint32_t other_place = 0;  // a single loader: tiles given to consumer 1
  // Loads the tile at consumer c's place `at` if it is this warp's, and moves to the next place.
  auto take_place = [&](int c, uint32_t& at, int64_t group, int32_t tile) {
    if (kOneLoader || static_cast<int>(at & 1) == warp % 2) {
      const uint32_t stage = c * L::kHalfStages + at % L::kHalfStages;
      const long long since = waits.begin();
      ptx::mbarrier_wait(&empty[stage], ((at / L::kHalfStages) & 1) ^ 1);
      waits.end(since);
      if (at == 0 && warp == 0 && lane == 0) timeline_stamp(kStampFirstLoad);
      loader.load(group, tile, smem + L::kKeys + stage * kTileBytes,
                  reinterpret_cast<float*>(smem + L::kScales + stage * kTileScaleBytes),
                  &full[stage], lane);
    }
    ++at;
  };
  uint32_t item_count = 0;
  auto group_rows = [&](int64_t row0) {
    return static_cast<int>(min(static_cast<int64_t>(p.rows_per_group), p.rows - row0));
  };
  // One work item of `group`, whose rows see the keys [first, last) of the item, a tile of the
  // walk among them (ItemKeys::any_tile); lane j holds row j's range [lo, hi), an empty one past
  // the group's rows.
  auto run_item = [&](int64_t group, int32_t lo, int32_t hi, int32_t first, int32_t last) {
    const int64_t row0 = group * p.rows_per_group;
    const int rows = group_rows(row0);
    const int32_t tile_begin = first / kTileKeys;
    const int32_t tile_end = (last + kTileKeys - 1) / kTileKeys;
    const int32_t walk_begin = TileWalk(p, tile_begin).tile;

    if (warp == 0)
      publish_item<kHeads, kN, kPaged, kEmit>(items, q_full, q_empty, item_count, q_map, w_map,
                                              smem, static_cast<int32_t>(row0), rows, tile_begin,
                                              tile_end, lo, hi, q_bytes, lane);
    // The item's steps are kTilesPerStep tiles of the walk each, alternating between the
    // consumers: a warp visits only its consumer's steps, found by arithmetic on the walk (a
    // single loader visits all).
    const int32_t tiles = TileWalk::count(p, tile_begin, tile_end);
    const uint32_t steps = (tiles + kTilesPerStep - 1) / kTilesPerStep;
    if constexpr (kOneLoader) {
      static_assert(kTilesPerStep == 1, "emitters take one tile per step");
      int32_t tile = walk_begin;
      for (uint32_t s = 0; s < steps; ++s) {
        if ((step_count + s) % kConsumerGroups == 0) {
          take_place(0, place, group, tile);
        } else {
          take_place(1, other_place, group, tile);
        }
        tile = TileWalk::advance(p, tile, 1);
      }
    } else {
      const uint32_t first_step = (consumer + kConsumerGroups - step_count % kConsumerGroups) %
                                  kConsumerGroups;  // this consumer's first step of the item
      int32_t step_tile = TileWalk::advance(p, walk_begin, first_step * kTilesPerStep);
      for (uint32_t s = first_step; s < steps; s += kConsumerGroups) {
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (s * kTilesPerStep + u < static_cast<uint32_t>(tiles)) {
            take_place(consumer, place, group, TileWalk::advance(p, step_tile, u));
          }
        }
        step_tile = TileWalk::advance(p, step_tile, kConsumerGroups * kTilesPerStep);
      }
    }
    step_count += steps;
    ++item_count;
  };
  if constexpr (kPaged) {
    // Decode: this CTA's equal share of all requests' key tiles (decode_share.cuh).
    for_each_share_piece(p, lane, [&](int64_t group, int32_t tile_begin, int32_t tile_end) {
      loader.load_window(group, (tile_begin * kTileKeys) >> p.page_shift, lane);
      const int64_t row0 = group * p.rows_per_group;
      const ItemKeys<kPaged, 32> keys(p, row0, group_rows(row0),
                                      static_cast<int64_t>(tile_begin) * kTileKeys,
                                      static_cast<int64_t>(tile_end) * kTileKeys, lane);
      if (keys.any_tile(p)) run_item(group, keys.lo, keys.hi, keys.first, keys.last);
    });
  } else {
    // Prefill: items (group, chunk) in turn, chunk-major, so the CTAs working at the same time
    // read the same keys (from L2).
    int64_t chunks = p.chunks;
    int64_t chunk_keys = p.chunk_keys;
    if (p.live_rows != nullptr) {
      // About two items per CTA over the live rows' groups, at most the planned chunks.
      const int64_t live = *p.live_rows;
      const int64_t wanted =
          live <= 0 ? 0 : min(max((2 * gridDim.x + live - 1) / live, int64_t{1}), p.chunks);
      const int64_t merged = wanted == 0 ? 1 : (p.chunks + wanted - 1) / wanted;
      chunks = wanted == 0 ? 0 : (p.chunks + merged - 1) / merged;
      chunk_keys = p.chunk_keys * merged;
    }
    // This CTA's items are blockIdx.x + i gridDim.x, chunk-major (item = chunk * groups +
    // group). In a chunk of several requests most items see nothing (a group sees only its own
    // request's keys), and checking them one at a time cost a dependent load of the rows' ranges
    // each: the warp checks kLookahead items at once, kRows lanes each, and runs those with a
    // tile, in order, with the ranges it loaded. Lane segment s follows item base + s gridDim.x
    // as (group, chunk), advanced without a division (the 40-register producer spilled with one
    // per item).
    constexpr int kRows = kN / kHeads;  // rows_per_group of a prefill launch
    constexpr int kLookahead = 32 / kRows;
    static_assert(32 % kRows == 0, "whole items per warp");
    // rows < 2^31 (checked); with no groups there are no items (p.groups > 0 below).
    const auto groups = static_cast<int32_t>(max(p.groups, int64_t{1}));
    const int64_t item = blockIdx.x + static_cast<int64_t>(lane / kRows) * gridDim.x;
    auto group = static_cast<int32_t>(item % groups);
    auto chunk = static_cast<int32_t>(item / groups);
    const int64_t advance = static_cast<int64_t>(kLookahead) * gridDim.x;
    const auto advance_groups = static_cast<int32_t>(advance % groups);
    const auto advance_chunks = static_cast<int32_t>(advance / groups);
    while (p.groups > 0 && __shfl_sync(0xffffffffu, chunk, 0) < chunks) {
      const int64_t row0 = static_cast<int64_t>(group) * kRows;
      const int rows = chunk < chunks ? group_rows(row0) : 0;
      const int64_t key_begin = static_cast<int64_t>(chunk) * chunk_keys;
      const ItemKeys<kPaged, kRows> keys(p, row0, rows, key_begin, key_begin + chunk_keys,
                                         lane % kRows);
      uint32_t pending = __ballot_sync(0xffffffffu, lane % kRows == 0 && keys.any_tile(p));
      for (; pending != 0; pending &= pending - 1) {
        const int from = __ffs(pending) - 1;  // the item's first lane
        const int32_t lo = __shfl_sync(0xffffffffu, keys.lo, from + lane % kRows);
        const int32_t hi = __shfl_sync(0xffffffffu, keys.hi, from + lane % kRows);
        run_item(__shfl_sync(0xffffffffu, group, from), lane < kRows ? lo : 0,
                 lane < kRows ? hi : 0, __shfl_sync(0xffffffffu, keys.first, from),
                 __shfl_sync(0xffffffffu, keys.last, from));
      }
      group += advance_groups;
      chunk += advance_chunks;
      if (group >= groups) {
        group -= groups;
        ++chunk;
      }
    }
  }
  if (warp == 0 && lane == 0) timeline_stamp(kStampProducerDone);
  if (lane == 0) waits.record(kProducerWaitSlot + 2 * warp);
  if (warp == 0) {
    const int buffer = item_count & 1;
    ptx::mbarrier_wait(&q_empty[buffer], ((item_count >> 1) & 1) ^ 1);
    if (lane == 0) {
      items[buffer].row0 = -1;
      ptx::mbarrier_arrive(&q_full[buffer]);
    }
  }
}

// ---- consumers ------------------------------------------------------------------------------

// Rows of one Q tile, and which (row, key row) sums each lane of a quad ends up owning: what it
// stores or emits.
//  * Three or more rows (lane-owned, or reduced across the quad): lane c owns rows 4 i + c, both
//    of its key rows (key_row and key_row + 8).
//  * One or two rows reduced across the quad in the emitting kernels (fused decode at next_n 1-2
//    with H = 64 and H = 32): the reduce-scatter ends with one (row, key row) per lane, so
//    each lane tests one score per tile against the gate where one or two of the four lanes
//    tested two (half the ballots and queue work; fused decode 64 x 131072 keys 340 -> 321 us
//    on the H200). The storing kernels keep the row-per-lane form: there it measured no faster.
// The sums are the same bits in both forms (reduce_scatter_rows).
template <int kHeads, int kN, bool kEmit = false>
struct TileRows {
  static constexpr int kRows = kN / kHeads;
  static constexpr int kPadded = (kRows + 3) / 4 * 4;
  static constexpr bool kSplitKeyRows = kEmit && !kLaneOwnedRows<kHeads, kN> && kRows <= 2;
  static constexpr int kPerLane = kSplitKeyRows ? 1 : kPadded / 4;  // rows a lane owns
  static constexpr int kKeyRowsPerLane = kSplitKeyRows ? 1 : 2;      // key rows of each
  // The tile row of the lane's owned row i. With one row, lanes c and c ^ 1 end with the same
  // sum, and only the even one owns it (owns).
  __device__ __forceinline__ static int row(int i, int lane) {
    if constexpr (kSplitKeyRows) return kRows == 2 ? lane & 1 : 0;
    return lane % 4 + 4 * i;
  }
  __device__ __forceinline__ static bool owns(int lane) {
    return !kSplitKeyRows || kRows == 2 || (lane & 1) == 0;
  }
  // Which of the thread's two key rows (0: key_row, 1: key_row + 8) is its r-th.
  __device__ __forceinline__ static int key_half(int r, int lane) {
    return kSplitKeyRows ? (lane >> 1) & 1 : r;
  }
};

// Which (row, head) pair of the Q tile column 8 j + 2 c + e of the wgmma holds; lane c of each quad
// holds the columns 8 j + 2 c + {0, 1} of its accumulators.
//  * Lane-owned rows (kLaneOwnedRows: 4 or 8 rows per tile, the Q tile loaded permuted): with
//    t = 2 j + e, row c + 4 (t / H), head t % H. Each lane holds every head of its own rows, so a
//    head sum never leaves its thread.
//  * Otherwise (1-3 rows: decode next_n 1-3 at H = 64, 1-2 at H = 32): row j / (H / 8), head
//    8 (j % (H / 8)) + 2 c + e; each row is spread over the quad and reduced across it.
template <int kHeads, int kN>
struct TileColumn {
  static constexpr bool kLaneRows = kLaneOwnedRows<kHeads, kN>;
  // The tile row of n-block j, element e, for lane c (c matters only for lane-owned rows).
  __device__ __forceinline__ static int row(int j, int e, int c) {
    return kLaneRows ? c + 4 * ((2 * j + e) / kHeads) : j / (kHeads / 8);
  }
  __device__ __forceinline__ static int head(int j, int e, int c) {
    return kLaneRows ? (2 * j + e) % kHeads : 8 * (j % (kHeads / 8)) + 2 * c + e;
  }
};

// Per-thread weights of one Q tile: w[2 j + e] is the weight of column 8 j + 2 (lane % 4) + e.
template <int kN>
struct TileWeights {
  float w[kN / 4];
};

template <int kHeads, int kN>
__device__ __forceinline__ void load_weights(TileWeights<kN>& weights, const float* tile_w,
                                             int lane) {
  using C = TileColumn<kHeads, kN>;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int row = C::row(j, 0, lane % 4);
    const int head = C::head(j, 0, lane % 4);  // even: the pair is heads head, head + 1
    const float2 pair = *reinterpret_cast<const float2*>(tile_w + row * kHeads + head);
    weights.w[2 * j] = pair.x;
    weights.w[2 * j + 1] = pair.y;
  }
}

// A thread's head sums over one tile, for its two key rows (16 warp + lane / 4, and + 8), times 2
// (relu taken as x + |x|). Lane-owned rows: four interleaved chains per (owned row, key row),
// n-block j feeding chain j % 4, so that eight independent FFMA chains hide their latency; they
// are combined as (s_0 + s_2) + (s_1 + s_3). Otherwise: one sum per (tile row, key row) of the
// thread's heads, reduced across the quad.
template <int kHeads, int kN>
struct HeadSums {
  using R = TileRows<kHeads, kN>;
  static constexpr int kChains = 4;
  float v[kLaneOwnedRows<kHeads, kN> ? R::kPerLane * 2 * kChains : R::kPadded * 2];
  // Lane-owned rows: chain k of owned row i, key row r. Otherwise: tile row q, key row r.
  __device__ __forceinline__ float& chain(int i, int r, int k) {
    return v[(i * 2 + r) * kChains + k];
  }
  __device__ __forceinline__ float& row_sum(int q, int r) { return v[q * 2 + r]; }
};

// The wgmma of one tile is issued in kParts column parts of kN / kParts, so that the head sums of
// the first part run while the tensor cores compute the next one.
template <int kN>
inline constexpr int kPartsFor = kN == 256 ? 2 : 1;

// Adds one column part's accumulators to the head sums, heads in ascending column order. `acc`
// holds the part's accumulators; its first n-block is block kFirstBlock of the tile.
template <int kHeads, int kN, int kPartN, int kFirstBlock>
__device__ __forceinline__ void add_head_sums(const float (&acc)[kPartN / 2],
                                              const TileWeights<kN>& weights,
                                              HeadSums<kHeads, kN>& sums) {
  if constexpr (kLaneOwnedRows<kHeads, kN>) {
#pragma unroll
    for (int local = 0; local < kPartN / 8; ++local) {
      const int j = kFirstBlock + local;  // n-block in the tile
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = (2 * j + e) / kHeads;  // owned row (TileColumn::row is c + 4 i)
        const int k = j % HeadSums<kHeads, kN>::kChains;
        const float x0 = acc[4 * local + e];
        const float x1 = acc[4 * local + 2 + e];
        sums.chain(i, 0, k) = __fmaf_rn(weights.w[2 * j + e], x0 + fabsf(x0), sums.chain(i, 0, k));
        sums.chain(i, 1, k) = __fmaf_rn(weights.w[2 * j + e], x1 + fabsf(x1), sums.chain(i, 1, k));
      }
    }
  } else {
    constexpr int kBlocksPerRow = kHeads / 8;
    constexpr int kFirstRow = kFirstBlock / kBlocksPerRow;
#pragma unroll
    for (int q = kFirstRow; q < kFirstRow + kPartN / kHeads; ++q) {
      float s0 = 0.0f;
      float s1 = 0.0f;
#pragma unroll
      for (int b = 0; b < kBlocksPerRow; ++b) {
        const int j = q * kBlocksPerRow + b;  // n-block in the tile
        const int local = j - kFirstBlock;    // n-block in the part
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x0 = acc[4 * local + e];
          const float x1 = acc[4 * local + 2 + e];
          s0 = __fmaf_rn(weights.w[2 * j + e], x0 + fabsf(x0), s0);
          s1 = __fmaf_rn(weights.w[2 * j + e], x1 + fabsf(x1), s1);
        }
      }
      sums.row_sum(q, 0) = s0;
      sums.row_sum(q, 1) = s1;
    }
  }
}

// The finished sums a lane owns (TileRows): owned[i][r] for its owned row i and its r-th key row.
template <int kHeads, int kN, bool kEmit>
using OwnedSums =
    float[TileRows<kHeads, kN, kEmit>::kPerLane][TileRows<kHeads, kN, kEmit>::kKeyRowsPerLane];

// The quad reduce-scatter of the head sums. Every (row, key row) sum ends as
//   (s_c + s_{c^2}) + (s_{c^1} + s_{c^3})
// of the four lanes' partial sums s, on whichever lane c owns it: an order fixed by the row
// alone, and since a + b == b + a exactly, the same bits on every lane (and in the split form as
// in the row-per-lane form). Rows past kRows (padding to a multiple of 4) must be zero.
template <int kHeads, int kN, bool kEmit>
__device__ __forceinline__ void reduce_scatter_rows(HeadSums<kHeads, kN>& sums, int lane,
                                                    OwnedSums<kHeads, kN, kEmit>& owned) {
  using R = TileRows<kHeads, kN, kEmit>;
  const bool high = (lane & 2) != 0;
  const bool odd = (lane & 1) != 0;
  if constexpr (R::kSplitKeyRows) {
    // Step 1 (lanes c, c ^ 2): keep key row (c >> 1) & 1 of every row, hand over the other.
    float half[R::kRows];
#pragma unroll
    for (int q = 0; q < R::kRows; ++q) {
      const float keep = high ? sums.row_sum(q, 1) : sums.row_sum(q, 0);
      const float send = high ? sums.row_sum(q, 0) : sums.row_sum(q, 1);
      half[q] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
    // Step 2 (lanes c, c ^ 1): two rows: keep row c & 1; one row: both lanes add the pair.
    if constexpr (R::kRows == 2) {
      const float keep = odd ? half[1] : half[0];
      const float send = odd ? half[0] : half[1];
      owned[0][0] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    } else {
      owned[0][0] = half[0] + __shfl_xor_sync(0xffffffffu, half[0], 1);
    }
  } else if constexpr (R::kRows == 1) {
    // One row (storing decode at next_n 1): the same sum on all four lanes in two
    // butterfly steps, without the three rows of padding; lanes 1-3 own padding rows, which
    // nothing stores.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float pair = sums.row_sum(0, r) + __shfl_xor_sync(0xffffffffu, sums.row_sum(0, r), 2);
      owned[0][r] = pair + __shfl_xor_sync(0xffffffffu, pair, 1);
    }
  } else {
    // Step 1 (lanes c, c ^ 2): keep rows with bit 1 of (q % 4) equal to bit 1 of c.
    float half[R::kPadded / 2][2];
#pragma unroll
    for (int i = 0; i < R::kPadded / 4; ++i) {
#pragma unroll
      for (int low = 0; low < 2; ++low) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float a = sums.row_sum(4 * i + low, r);
          const float b = sums.row_sum(4 * i + 2 + low, r);
          const float keep = high ? b : a;
          const float send = high ? a : b;
          half[2 * i + low][r] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
      }
    }
    // Step 2 (lanes c, c ^ 1): keep the row whose bit 0 matches bit 0 of c.
#pragma unroll
    for (int i = 0; i < R::kPerLane; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float a = half[2 * i][r];
        const float b = half[2 * i + 1][r];
        const float keep = odd ? b : a;
        const float send = odd ? a : b;
        owned[i][r] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
      }
    }
  }
}

// The finished head sums this lane owns (TileRows). The order of every addition is fixed by the
// row alone.
template <int kHeads, int kN, bool kEmit>
__device__ __forceinline__ void owned_row_sums(HeadSums<kHeads, kN>& sums, int lane,
                                               OwnedSums<kHeads, kN, kEmit>& owned) {
  if constexpr (kLaneOwnedRows<kHeads, kN>) {
#pragma unroll
    for (int i = 0; i < TileRows<kHeads, kN>::kPerLane; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        owned[i][r] = (sums.chain(i, r, 0) + sums.chain(i, r, 2)) +
                      (sums.chain(i, r, 1) + sums.chain(i, r, 3));
      }
    }
  } else {
    reduce_scatter_rows<kHeads, kN, kEmit>(sums, lane, owned);
  }
}

// Waits for part kPart's wgmma (committed one group per part) and adds its head sums, for
// every part but the last.
template <int kHeads, int kN, int kParts, int kPart>
__device__ __forceinline__ void sum_parts_while_mma_runs(float (&acc)[kParts][kN / kParts / 2],
                                                         const TileWeights<kN>& weights,
                                                         HeadSums<kHeads, kN>& sums) {
  constexpr int kPartN = kN / kParts;
  if constexpr (kPart < kParts - 1) {
    ptx::wgmma_wait_group<kParts - 1 - kPart>();
#pragma unroll
    for (int i = 0; i < kPartN / 2; ++i) ptx::fence_operand(acc[kPart][i]);
    add_head_sums<kHeads, kN, kPartN, kPart * kPartN / 8>(acc[kPart], weights, sums);
    sum_parts_while_mma_runs<kHeads, kN, kParts, kPart + 1>(acc, weights, sums);
  }
}

template <int kTiles, int kParts, int kPartN>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kTiles][kParts][kPartN / 2]) {
#pragma unroll
  for (int u = 0; u < kTiles; ++u) {
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
#pragma unroll
      for (int i = 0; i < kPartN / 2; ++i) ptx::fence_operand(acc[u][part][i]);
    }
  }
}

// One consumer warp's candidate queue (ScoreParams::gate): entries (queue_entry) in shared
// memory; `size` is warp-uniform. The addresses are recomputed where used (registers are scarce
// in the N = 256 consumers). `warp` (the consumer warp, 0-7) comes through lane 0, so the
// compiler knows it is warp-uniform: derived from threadIdx.x, every queue address, the reserved
// row0 and places loaded through them, and each branch on those counted as divergent, and that
// took the whole consumer loop (its stage and wgmma descriptor arithmetic included) off the
// uniform datapath (H32 prefill emitting kernel: 47 -> 24 R2UR, 80 -> 2 divergence checks, 215
// -> 64 reconvergence regions).
// L: the kernel's SharedLayout; `warp` is the queue's index (the consumer warp, or the emitter).
template <typename L>
struct CandidateQueue {
  uint8_t* smem;
  uint32_t size;
  int warp;
  __device__ __forceinline__ uint64_t* keys() const {
    return reinterpret_cast<uint64_t*>(smem + L::kQueueKeys) + warp * L::kEntriesPerQueue;
  }
  // [0]: the row0 of the reserved entries' item, or -1; [1 + q]: row slot q's place.
  __device__ __forceinline__ int32_t* meta() const {
    return reinterpret_cast<int32_t*>(smem + L::kQueueMeta) + warp * kQueueMetaWords;
  }
};

// A queue entry: the score's bits, the row slot (row - row0 of the item) and the key's index in
// its row (key - lo < kMaxEmitKeys). The rank key is built when the queue is written out
// (write_queue), once per entry; built at the queueing, every lane of a warp with any key taken
// (over half the warp votes of a step) ran it, and the slot took a store of its own.
constexpr int kEntrySlotShift = 29;
static_assert(kMaxEmitKeys == int64_t{1} << kEntrySlotShift &&
                  kMaxRowsPerGroup <= 1 << (32 - kEntrySlotShift),
              "a queue entry's low word holds the row slot and the key's index");

__device__ __forceinline__ uint64_t queue_entry(float score, int slot, uint32_t index) {
  return (static_cast<uint64_t>(__float_as_uint(score)) << 32) |
         (static_cast<uint32_t>(slot) << kEntrySlotShift | index);
}
__device__ __forceinline__ int entry_slot(uint64_t entry) {
  return static_cast<int>(static_cast<uint32_t>(entry) >> kEntrySlotShift);
}
__device__ __forceinline__ uint64_t entry_rank_key(uint64_t entry) {
  constexpr uint32_t kIndexMask = (1u << kEntrySlotShift) - 1;
  return rank_key(score_key(static_cast<uint32_t>(entry >> 32)),
                  static_cast<uint32_t>(entry) & kIndexMask);
}

// A row's gate as the emission tests it: a float compare, or every key when the threshold is
// NaN (rows that fit their candidate slots take every key, NaN scores included). The gate kernel
// stores the float (key_threshold of its score key): decoding a score key per tile took 6
// instructions of the emitting prefill step.
struct RowGate {
  float threshold;
  bool take_all;

  __device__ __forceinline__ explicit RowGate(float gate)
      : threshold(gate), take_all(gate != gate) {}
  __device__ __forceinline__ bool passes(float score) const {
    return take_all || score >= threshold;
  }
};

// Queues the visible key `key` of row slot `slot` when its score passes the row's gate. Needs
// room for 32 entries. Call from the whole warp.
template <typename L>
__device__ __forceinline__ void queue_candidate(CandidateQueue<L>& queue, int slot,
                                                const RowGate& gate, int32_t lo, int32_t hi,
                                                int32_t key, float score, int lane) {
  const bool take =
      static_cast<uint32_t>(key - lo) < static_cast<uint32_t>(hi - lo) && gate.passes(score);
  const uint32_t ballot = __ballot_sync(0xffffffffu, take);
  if (take) {
    const uint32_t at = queue.size + __popc(ballot & ((1u << lane) - 1));
    queue.keys()[at] = queue_entry(score, slot, static_cast<uint32_t>(key - lo));
  }
  queue.size += __popc(ballot);
}

// Hands the queue to its rows' candidate slots in two halves, so that the wait for the atomics
// overlaps other work: reserve_queue counts each row slot's entries and issues one atomic per row
// (lane q for row slot q, all at once) for their place; write_queue copies the entries there and
// empties the queue. The reservation waits in shared memory (queue meta), not in registers: the
// N = 256 consumers have none to spare. Call both from the whole warp. Two forms, by the row
// slots of a tile (fused decode 64 x 131072 and prefill 2048 x 131072 on the H200):
//  * up to 3 (decode next_n 1-3): a pass over the queue per row slot, a vote per 32 entries. An
//    atomic per entry on the row's shared word serialized a warp's lanes on it (next_n 1: scan
//    270 -> 288 us), and one per group of a slot's lanes (__match_any_sync) measured 2-5 % slower
//    at next_n 2-3;
//  * 4 or 8 (prefill, decode next_n 4): one pass, each entry taking its place by a shared atomic
//    on its row's meta word. A pass per row slot took ~70 instructions per tile of the H = 32
//    prefill scan (8 passes); the H = 32 scan went from 2.86 to 2.44 ms, and fused decode next_n
//    4 (64 x 131072 keys) from 706-717 to 647-655 us per call. Places within a row then follow
//    the atomics' order; the select ranks candidates by rank key, so no slot order reaches the
//    answer.
template <int kRows>
inline constexpr bool kOnePassFlush = kRows >= 4;

// The reservation's second half: lane q < kRows holds row slot q's entries in the queue (`mine`)
// and takes their places in the row's slots.
template <typename L, int kRows>
__device__ __forceinline__ void reserve_counted(const ScoreParams& p,
                                                const CandidateQueue<L>& queue, int32_t row0,
                                                uint32_t mine, int lane) {
  if (lane < kRows) {
    auto* row_count = reinterpret_cast<uint32_t*>(p.candidate_counts + row0 + lane);
    reinterpret_cast<uint32_t*>(queue.meta() + 1)[lane] =
        mine > 0 ? atomicAdd(row_count, mine) : 0u;
  }
  if (lane == 0) queue.meta()[0] = row0;
  __syncwarp();
}

template <typename L, int kRows>
__device__ __forceinline__ void reserve_queue(const ScoreParams& p, const CandidateQueue<L>& queue,
                                              int32_t row0, int lane) {
  const uint64_t* keys = queue.keys();
  uint32_t* counts = reinterpret_cast<uint32_t*>(queue.meta() + 1);
  __syncwarp();
  uint32_t mine = 0;
  if constexpr (kOnePassFlush<kRows>) {
    if (lane < kRows) counts[lane] = 0;
    __syncwarp();
    for (uint32_t base = 0; base < queue.size; base += 32) {
      const uint32_t j = base + lane;
      if (j < queue.size) atomicAdd(counts + entry_slot(keys[j]), 1u);
    }
    __syncwarp();
    if (lane < kRows) mine = counts[lane];
  } else {
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      uint32_t count = 0;
      for (uint32_t base = 0; base < queue.size; base += 32) {
        const uint32_t j = base + lane;
        const bool take = j < queue.size && (kRows == 1 || entry_slot(keys[j]) == q);
        count += __popc(__ballot_sync(0xffffffffu, take));
      }
      if (lane == q) mine = count;
    }
  }
  reserve_counted<L, kRows>(p, queue, row0, mine, lane);
}

template <typename L>
__device__ __forceinline__ bool queue_reserved(const CandidateQueue<L>& queue) {
  return queue.meta()[0] >= 0;
}

template <typename L, int kRows>
__device__ __forceinline__ void write_queue(const ScoreParams& p, CandidateQueue<L>& queue,
                                            int lane) {
  const uint64_t* keys = queue.keys();
  int32_t* meta = queue.meta();
  uint32_t* places = reinterpret_cast<uint32_t*>(meta + 1);
  const int32_t row0 = meta[0];
  const auto capacity = static_cast<uint32_t>(p.candidate_capacity);
  auto write = [&](uint64_t entry, int q, uint32_t at) {
    if (at < capacity) {
      p.candidates[static_cast<int64_t>(row0 + q) * capacity + at] = entry_rank_key(entry);
    }
  };
  if constexpr (kOnePassFlush<kRows>) {
    for (uint32_t base = 0; base < queue.size; base += 32) {
      const uint32_t j = base + lane;
      if (j < queue.size) {
        const uint64_t entry = keys[j];
        const int q = entry_slot(entry);
        write(entry, q, atomicAdd(places + q, 1u));
      }
    }
  } else {
    const uint32_t lower_lanes = (1u << lane) - 1;
#pragma unroll
    for (int q = 0; q < kRows; ++q) {
      uint32_t place = places[q];
      for (uint32_t base = 0; base < queue.size; base += 32) {
        const uint32_t j = base + lane;
        const uint64_t entry = j < queue.size ? keys[j] : 0;
        const bool take = j < queue.size && (kRows == 1 || entry_slot(entry) == q);
        const uint32_t ballot = __ballot_sync(0xffffffffu, take);
        if (take) write(entry, q, place + __popc(ballot & lower_lanes));
        place += __popc(ballot);
      }
    }
  }
  queue.size = 0;
  __syncwarp();
  if (lane == 0) meta[0] = -1;
  __syncwarp();
}

template <int kHeads, int kN, bool kPaged, bool kEmit>
__device__ __forceinline__ void consume(const ScoreParams& p, uint8_t* smem, int consumer) {
  constexpr int kTilesPerStep = kTilesPerStepFor<kN, kEmit>;
  constexpr int kParts = kPartsFor<kN>;
  constexpr int kPartN = kN / kParts;
  static_assert(kParts == 1 || kTilesPerStep == 1, "split parts or pair tiles, not both");
  using L = SharedLayout<kHeads, kN, kEmit, kPaged>;
  using R = TileRows<kHeads, kN, kEmit>;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int key_row = 16 * warp + lane / 4;  // and key_row + 8
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* full = barriers;
  uint64_t* empty = barriers + L::kStages;
  uint64_t* q_full = barriers + 2 * L::kStages;
  uint64_t* q_empty = q_full + 2;
  const ItemInfo* items = reinterpret_cast<const ItemInfo*>(smem + L::kItems);

  // The launch has p.gate set exactly when kEmit. Decode consumers test their scores; prefill
  // consumers hand them to the emitters (emit_scores).
  constexpr bool emit = kEmit && !L::kByEmitters;
  constexpr bool to_emitter = L::kByEmitters;
  CandidateQueue<L> queue{smem, 0,
                          __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32) - 4, 0)};
  // Entries one owned row's key rows may add (queue_candidate once per key row). The room is
  // checked per owned row, not per tile: a tile of H = 32 prefill (8 rows, two owned per lane)
  // may add 128, and flushing whenever that is not free flushed at every tile.
  constexpr uint32_t kRowEntries = 32 * R::kKeyRowsPerLane;
  static_assert(kRowEntries <= kQueueEntries, "a row's candidates must fit the queue");
  // An item's last candidates are written during the next item's first step, after its wgmma
  // is issued: the reservation's atomics then complete while the tensor cores run.
  if (emit && lane == 0) queue.meta()[0] = -1;
  __syncwarp();
  float acc[kTilesPerStep][kParts][kPartN / 2] = {};
  TileWeights<kN> weights;
  TimelineWaits waits;      // (a diagnostic build's; nothing otherwise)
  uint32_t my_tiles = 0;    // tiles this warpgroup has read: its place in its half of the ring
  uint32_t step_count = 0;  // steps so far; step s belongs to consumer s % 2
  for (uint32_t item_count = 0;; ++item_count) {
    const int buffer = item_count & 1;
    const ItemInfo& info = wait_for_item(items, q_full, item_count);
    const int32_t row0 = info.row0;
    if (row0 < 0) {
      if (threadIdx.x % 128 == 0) {
        timeline_stamp(consumer == 0 ? kStampConsumer0Done : kStampConsumer1Done);
        timeline_tiles(consumer, my_tiles);
        waits.record(kConsumerWaitSlot + 2 * consumer);
      }
      break;
    }
    const int32_t tile_begin = info.tile_begin;
    const int32_t tile_end = info.tile_end;
    // The rows this lane stores (or emits for): q = R::row(i, lane).
    int32_t lo[R::kPerLane];
    int32_t hi[R::kPerLane];
    float gate[R::kPerLane];  // loaded once per item: a load per step stalled the epilogue
#pragma unroll
    for (int i = 0; i < R::kPerLane; ++i) {
      const int q = R::row(i, lane);
      const bool mine = q < R::kRows && q < info.rows && R::owns(lane);
      lo[i] = mine ? info.lo[q] : 0;
      hi[i] = mine ? info.hi[q] : 0;
      gate[i] = emit && lo[i] < hi[i] ? __ldg(p.gate + row0 + q) : 0.0f;
    }
    load_weights<kHeads, kN>(
        weights, reinterpret_cast<const float*>(smem + L::kWeights + buffer * kN * 4), lane);
    const uint64_t q_desc0 =
        ptx::smem_descriptor_k128_swizzle128(smem + L::kQ + buffer * L::kQBytes, 0);

    for (TileWalk walk(p, tile_begin); walk.tile < tile_end; ++step_count) {
      int32_t tile_of[kTilesPerStep];
      const int tiles = take_step<kTilesPerStep>(walk, p, tile_end, tile_of);
      if (static_cast<int>(step_count % kConsumerGroups) != consumer) continue;
      uint32_t stages[kTilesPerStep];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const uint32_t place = my_tiles + u;
        stages[u] = consumer * L::kHalfStages + place % L::kHalfStages;
        if (u < tiles) {
          const long long since = waits.begin();
          ptx::mbarrier_wait(&full[stages[u]], (place / L::kHalfStages) & 1);
          waits.end(since);
        }
      }
      if (my_tiles == 0 && consumer == 0 && threadIdx.x % 128 == 0) timeline_stamp(kStampFirstTile);
      my_tiles += tiles;
      fence_accumulators<kTilesPerStep, kParts, kPartN>(acc);
      ptx::wgmma_fence();
      // No branch around wgmma (ptxas would serialize them): a missing second tile re-reads the
      // first one's stage and its result is dropped.
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const uint32_t stage = u < tiles ? stages[u] : stages[0];
        const uint64_t key_desc =
            ptx::smem_descriptor_k128_swizzle128(smem + L::kKeys + stage * kTileBytes, 0);
#pragma unroll
        for (int part = 0; part < kParts; ++part) {
          const uint64_t q_desc = ptx::smem_descriptor_advance(q_desc0, part * kPartN * kHeadDim);
#pragma unroll
          for (int k = 0; k < kHeadDim / 32; ++k) {
            ptx::WgmmaE4M3<kPartN>::mma(acc[u][part],
                                        ptx::smem_descriptor_advance(key_desc, 32 * k),
                                        ptx::smem_descriptor_advance(q_desc, 32 * k), k > 0);
          }
          ptx::wgmma_commit_group();
        }
      }
      if (emit && queue_reserved(queue)) write_queue<L, R::kRows>(p, queue, lane);
      HeadSums<kHeads, kN> sums[kTilesPerStep] = {};
      // The head sums of each part but the last overlap the wgmma of the parts after it.
      sum_parts_while_mma_runs<kHeads, kN, kParts, 0>(acc[0], weights, sums[0]);
      ptx::wgmma_wait_group<0>();
      fence_accumulators<kTilesPerStep, kParts, kPartN>(acc);
      // relu was taken as x + |x| = 2 relu(x): the 1/2 is exact in the scale.
      float half_scale[kTilesPerStep][R::kKeyRowsPerLane];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const float* scales =
            reinterpret_cast<const float*>(smem + L::kScales + stages[u] * kTileScaleBytes);
#pragma unroll
        for (int r = 0; r < R::kKeyRowsPerLane; ++r) {
          half_scale[u][r] = 0.5f * scales[key_row + 8 * R::key_half(r, lane)];
        }
      }
      // Every thread arrives after its own reads of the stage (its wgmma and scales). The scales
      // are read by ld.shared (generic proxy) and the stage is refilled by TMA (async proxy), so
      // the arrival waits behind a proxy fence: without it the loads may still be in flight when
      // the producer reuses the stage (seen on the H200 as wrong scores in H32 prefill once the
      // consumer loop ran faster; decode issued its arrivals with the loads in flight too).
      ptx::fence_proxy_async_shared();
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        if (u < tiles) ptx::mbarrier_arrive(&empty[stages[u]]);
      }
      // Every tile's sums first, without a branch between them, so that the compiler interleaves
      // the tiles' FFMA chains; a step's missing second tile is summed and never stored.
      OwnedSums<kHeads, kN, kEmit> owned[kTilesPerStep];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        add_head_sums<kHeads, kN, kPartN, (kParts - 1) * kPartN / 8>(acc[u][kParts - 1], weights,
                                                                     sums[u]);
        owned_row_sums<kHeads, kN, kEmit>(sums[u], lane, owned[u]);
      }
      if constexpr (to_emitter) {
        // The step's scores, every key of the tile (the emitter tests the visible range), to
        // this warpgroup's next score buffer.
        static_assert(kTilesPerStep == 1 && R::kKeyRowsPerLane == 2, "one tile per step");
        const uint32_t my_step = my_tiles - 1;
        const int slot = consumer * kScoreBuffers + static_cast<int>(my_step % kScoreBuffers);
        ptx::mbarrier_wait(&barriers[L::kScoreEmpty + slot], ((my_step / kScoreBuffers) & 1) ^ 1);
        float* scores = reinterpret_cast<float*>(smem + L::kScores + slot * L::kScoreBufferBytes);
#pragma unroll
        for (int i = 0; i < R::kPerLane; ++i) {
          float* row_scores = scores + R::row(i, lane) * kScoreStride + key_row;
          row_scores[0] = owned[0][i][0] * half_scale[0][0];
          row_scores[8] = owned[0][i][1] * half_scale[0][1];
        }
        ptx::mbarrier_arrive(&barriers[L::kScoreFull + slot]);
      } else {
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (u >= tiles) break;
          const int32_t key0 = tile_of[u] * kTileKeys + key_row;
          const int32_t key1 = key0 + 8;
#pragma unroll
          for (int i = 0; i < R::kPerLane; ++i) {
            const int q = R::row(i, lane);
            if constexpr (emit) {  // (the storing branch reads two key rows per lane)
              if (queue.size > kQueueEntries - kRowEntries) {
                reserve_queue<L, R::kRows>(p, queue, row0, lane);
                write_queue<L, R::kRows>(p, queue, lane);
              }
              const RowGate row_gate(gate[i]);
#pragma unroll
              for (int r = 0; r < R::kKeyRowsPerLane; ++r) {
                const int32_t key = key0 + 8 * R::key_half(r, lane);
                queue_candidate(queue, q, row_gate, lo[i], hi[i], key,
                                owned[u][i][r] * half_scale[u][r], lane);
              }
            } else {
              // Sampled tiles are stored side by side: tile t at column block t / tile_stride.
              const int32_t column0 = (tile_of[u] >> p.tile_shift) * kTileKeys + key_row;
              float* out = p.logits + static_cast<int64_t>(row0 + q) * p.logits_stride;
              const float score0 = owned[u][i][0] * half_scale[u][0];
              const float score1 = owned[u][i][1] * half_scale[u][1];
              if (key0 >= lo[i] && key0 < hi[i]) out[column0] = score0;
              if (key1 >= lo[i] && key1 < hi[i]) out[column0 + 8] = score1;
            }
          }
        }
      }
      // The next step is the other warpgroup's: step over it here, not through another pass of
      // the loop head, whose branches cost the consumer more than the skipped step's own work
      // (prefill H64 4096 x 131072: 9.59-9.61 -> 9.21-9.28 ms in alternation).
      if (walk.tile < tile_end) {
        int32_t skipped[kTilesPerStep];
        take_step<kTilesPerStep>(walk, p, tile_end, skipped);
        ++step_count;
      }
    }
    if (emit) {
      // A warpgroup without a step in this item may still hold the previous item's entries.
      if (queue_reserved(queue)) write_queue<L, R::kRows>(p, queue, lane);
      if (queue.size > 0) reserve_queue<L, R::kRows>(p, queue, row0, lane);
    }
    // Every consumer thread, after its last read; the weights were read by ld.shared and are
    // refilled by TMA (see the stage release above).
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(&q_empty[buffer]);
  }
  if (emit && queue_reserved(queue)) write_queue<L, R::kRows>(p, queue, lane);
}

// ---- emitters (prefill) ---------------------------------------------------------------------

// Emitter `emitter` (producer warp emitter + 1) in the emitting prefill scan: tests the
// consumers' scores against the rows' gates and places the candidates (kEmitters). It walks the
// items and steps as the consumers do and takes every third step, reads it from its consumer
// warpgroup's score buffer (rows of kScoreStride floats, key k of the tile at column k) and
// releases the buffer once read. The emitters must keep up with the tensor-core work (~1600
// cycles per tile and warpgroup), so each lane owns one row for the whole item (its gate and
// range in registers) and 2 kRows of its keys, tested without a vote each: a lane's taken scores
// form a mask, and one warp scan of the masks' counts places them all. Each row's entries are
// counted as they are queued, so the flush (when a step's entries do not fit, and at the item's
// end) takes its places without a counting pass; it holds only this warp while the consumers
// fill the next buffers. What an emitter step costs is its instructions, which share the SM's
// issue slots and power with the consumers: a step inside its rows' ranges is a compare per
// score, and the taken scores (~2 %) are queued by a loop over the mask's set bits. Testing every
// score against its range and unrolling the queueing over all of a lane's scores (predicated)
// took ~220 instructions per H = 32 step against ~90, and the H = 32 scan 7 % longer.
// Buffer phases: a warpgroup's step j uses buffer j % kScoreBuffers, and an emitter waits for its
// phase j / kScoreBuffers by parity, which is sound only if step j - kScoreBuffers has been
// written. An emitter's steps of one warpgroup are 3 of that warpgroup's steps apart (global
// steps 6 apart), and it read the previous one itself.
template <int kHeads, int kN, bool kPaged, bool kEmit>
__device__ __forceinline__ void emit_scores(const ScoreParams& p, uint8_t* smem, int emitter) {
  using L = SharedLayout<kHeads, kN, kEmit, kPaged>;
  constexpr int kRows = kN / kHeads;
  constexpr int kLanesPerRow = 32 / kRows;
  constexpr int kVectors = kTileKeys / 4 / kLanesPerRow;  // float4 of the row per lane
  constexpr int kMine = 4 * kVectors;                     // scores per lane
  static_assert(L::kByEmitters && kTilesPerStepFor<kN, kEmit> == 1 && kRows <= kMaxRowsPerGroup &&
                    32 % kRows == 0,
                "emitters take one tile per step, a whole number of lanes per row");
  static_assert(kScoreBuffers >= 3 && kConsumerGroups == 2 && kEmitterWarps == 3,
                "an emitter's steps of a warpgroup lie within kScoreBuffers of each other");
  static_assert(L::kEntriesPerQueue >= kRows * kTileKeys, "a step's entries fit an empty queue");
  const int lane = threadIdx.x % 32;
  const int row = lane / kLanesPerRow;  // the row slot this lane tests
  const int first_lane = row * kLanesPerRow;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* q_full = barriers + 2 * L::kStages;
  uint64_t* q_empty = q_full + 2;
  const ItemInfo* items = reinterpret_cast<const ItemInfo*>(smem + L::kItems);
  CandidateQueue<L> queue{smem, 0, __shfl_sync(0xffffffffu, emitter, 0)};
  uint32_t step_count = 0;  // steps so far; step s is consumer s % 2's step s / 2
  for (uint32_t item_count = 0;; ++item_count) {
    const int buffer = item_count & 1;
    const ItemInfo& info = wait_for_item(items, q_full, item_count);
    const int32_t row0 = info.row0;
    if (row0 < 0) break;
    const int32_t tile_end = info.tile_end;
    int32_t lo = 0;
    int32_t hi = 0;  // an empty range for rows past info.rows
    float gate = 0.0f;
    if (row < info.rows) {
      lo = info.lo[row];
      hi = info.hi[row];
      if (lo < hi) gate = __ldg(p.gate + row0 + row);
    }
    const RowGate row_gate(gate);
    uint32_t row_entries = 0;  // this row's entries in the queue (on every lane of the row)
    auto flush = [&] {
      const uint32_t mine =
          __shfl_sync(0xffffffffu, row_entries, min(lane, kRows - 1) * kLanesPerRow);
      reserve_counted<L, kRows>(p, queue, row0, mine, lane);
      write_queue<L, kRows>(p, queue, lane);
      row_entries = 0;
    };
    for (TileWalk walk(p, info.tile_begin); walk.tile < tile_end; ++step_count) {
      const int32_t tile = walk.tile;
      walk.next(p);
      if (static_cast<int>(step_count % kEmitterWarps) != emitter) continue;
      const uint32_t step = step_count / kConsumerGroups;  // of warpgroup step_count % 2
      const int slot = static_cast<int>(step_count % kConsumerGroups) * kScoreBuffers +
                       static_cast<int>(step % kScoreBuffers);
      ptx::mbarrier_wait(&barriers[L::kScoreFull + slot], (step / kScoreBuffers) & 1);
      // Vector v of this lane: the row's columns 4 (lane % kLanesPerRow) + 4 kLanesPerRow v + 0..3.
      const float* scores =
          reinterpret_cast<const float*>(smem + L::kScores + slot * L::kScoreBufferBytes) +
          row * kScoreStride + 4 * (lane % kLanesPerRow);
      const int32_t key0 = tile * kTileKeys + 4 * (lane % kLanesPerRow);
      // Score e of this lane is element e % 4 of vector e / 4 (its column, key - key0: column()).
      auto column = [](uint32_t e) {
        return static_cast<int>(4 * kLanesPerRow * (e / 4) + e % 4);
      };
      float values[kMine];
#pragma unroll
      for (int v = 0; v < kVectors; ++v) {
        const float4 four = *reinterpret_cast<const float4*>(scores + column(4 * v));
        values[4 * v] = four.x;
        values[4 * v + 1] = four.y;
        values[4 * v + 2] = four.z;
        values[4 * v + 3] = four.w;
      }
      // Most steps lie inside the lane's row range, on a gated row: the compare alone decides
      // (rows that take every key, and the steps at range ends, test each key's range too).
      const int32_t tile_key0 = tile * kTileKeys;
      const bool inside = !row_gate.take_all && tile_key0 >= lo && tile_key0 + kTileKeys <= hi;
      uint32_t taken = 0;
      if (inside) {
#pragma unroll
        for (int e = 0; e < kMine; ++e) {
          taken |= static_cast<uint32_t>(values[e] >= row_gate.threshold) << e;
        }
      } else {
#pragma unroll
        for (int e = 0; e < kMine; ++e) {
          const int32_t key = key0 + column(e);
          const bool take = static_cast<uint32_t>(key - lo) < static_cast<uint32_t>(hi - lo) &&
                            row_gate.passes(values[e]);
          taken |= static_cast<uint32_t>(take) << e;
        }
      }
      // Places: an inclusive scan of the lanes' counts.
      const uint32_t count = __popc(taken);
      const uint32_t through = warp_inclusive_scan(count);
      const uint32_t total = __shfl_sync(0xffffffffu, through, 31);
      // Flushed only when this step's entries do not fit (a whole tile may pass its gates).
      if (queue.size + total > static_cast<uint32_t>(L::kEntriesPerQueue)) flush();
      // The row's count: its last lane's scan minus the lane before its first.
      const uint32_t row_through = __shfl_sync(0xffffffffu, through, first_lane + kLanesPerRow - 1);
      const uint32_t row_before = __shfl_sync(0xffffffffu, through, max(first_lane - 1, 0));
      row_entries += row_through - (first_lane > 0 ? row_before : 0);
      // The taken scores are read again from the buffer, released only after (holding all
      // 2 kRows of them across the scan spilled in a 40-register emitter, tried at H = 32).
      uint64_t* keys = queue.keys() + queue.size + (through - count);
      for (uint32_t rest = taken; rest != 0; rest &= rest - 1) {
        const auto e = static_cast<uint32_t>(__ffs(rest) - 1);
        *keys++ = queue_entry(scores[column(e)], row, static_cast<uint32_t>(key0 + column(e) - lo));
      }
      queue.size += total;
      // The proxy fence is not what orders these reads (the consumers' stores wrote them, not
      // TMA); it keeps to the rule that check_sass.py holds every arrival to.
      ptx::fence_proxy_async_shared();
      ptx::mbarrier_arrive(&barriers[L::kScoreEmpty + slot]);
    }
    __syncwarp();
    if (queue.size > 0) flush();
    ptx::fence_proxy_async_shared();  // as above; TMA refills this item's Q buffer
    ptx::mbarrier_arrive(&q_empty[buffer]);
  }
}

// ---- the kernel -----------------------------------------------------------------------------

template <int kHeads, int kN, bool kPaged, bool kEmit>
__global__ void __launch_bounds__(kThreads, 1)
    score_kernel(const __grid_constant__ CUtensorMap q_map,
                 const __grid_constant__ CUtensorMap w_map,
                 const __grid_constant__ CUtensorMap key_map,
                 const __grid_constant__ CUtensorMap scale_map, const ScoreParams params) {
  static_assert(kHeads == 32 || kHeads == 64, "H must be 32 or 64");
  static_assert(kN % kHeads == 0 && kN / kHeads <= kMaxRowsPerGroup, "N = rows x H");
  using L = SharedLayout<kHeads, kN, kEmit, kPaged>;
  extern __shared__ __align__(16) uint8_t smem[];
  // The 128-byte swizzle pattern is anchored to 1024-byte boundaries. On sm_90 a kernel without
  // static shared memory gets its dynamic shared memory right after the 1 KiB the system
  // reserves, so the base is 1024-aligned; ptxas does not see it (it builds the address from the
  // CTA's cluster rank) and an alignment fix-up was recomputed at every use (3 uniform
  // instructions per queued score in the emitting kernels). A different layout stops here.
  if (ptx::smem_address(smem) % 1024 != 0) __trap();
  // Broadcast from lane 0, the compiler knows the warpgroup is warp-uniform: the consumers' stage
  // arithmetic and wgmma descriptors then live in uniform registers (H64 prefill: 44 -> 13 R2UR
  // moves, none left in the step loop; 441 -> 406 SASS instructions per step; 4096 x 131072
  // 8.88 -> 8.40 ms in alternation; decode H64 b64 x 131072 298-299 -> 288-290 us once the
  // producer kept up with the consumers, though 7 % slower before that).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  constexpr bool kWideProducer = kPaged || kEmitters<kHeads, kEmit, kPaged>;

  if (threadIdx.x == 0) {
    timeline_stamp(kStampEntry);
    uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
    for (int s = 0; s < L::kStages; ++s) {
      ptx::mbarrier_init(&barriers[s], 1);                 // full: producer + TMA bytes
      ptx::mbarrier_init(&barriers[L::kStages + s], 128);  // empty: the consuming WG's threads
    }
    // q_empty: every consumer thread, and every emitter lane.
    constexpr int kItemReaders =
        128 * kConsumerGroups + (L::kByEmitters ? 32 * kEmitterWarps : 0);
    for (int b = 0; b < 2; ++b) {
      ptx::mbarrier_init(&barriers[2 * L::kStages + b], 1);                 // q_full
      ptx::mbarrier_init(&barriers[2 * L::kStages + 2 + b], kItemReaders);  // q_empty
    }
    for (int b = 0; b < kConsumerGroups * kScoreBuffers && L::kByEmitters; ++b) {
      ptx::mbarrier_init(&barriers[L::kScoreFull + b], 128);  // the consumer warpgroup's threads
      ptx::mbarrier_init(&barriers[L::kScoreEmpty + b], 32);  // an emitter's lanes
    }
    ptx::fence_barrier_init();
    ptx::prefetch_tensor_map(&q_map);
    ptx::prefetch_tensor_map(&w_map);
    ptx::prefetch_tensor_map(&key_map);
    ptx::prefetch_tensor_map(&scale_map);
  }
  // Launched as a programmatic dependent (launch.h): nothing in global memory is touched before
  // the kernel before this one has completed.
  ptx::wait_prior_grids();
  __syncthreads();
  if (threadIdx.x == 0) timeline_stamp(kStampReady);

  if (warpgroup == 0) {
    ptx::setmaxnreg_decrease<kProducerRegisters<kWideProducer>>();
    if constexpr (kEmitters<kHeads, kEmit, kPaged>) {
      const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0);
      if (warp > 0) {
        emit_scores<kHeads, kN, kPaged, kEmit>(params, smem, warp - 1);
        return;
      }
    }
    produce<kHeads, kN, kPaged, kEmit>(params, &q_map, &w_map, &key_map, &scale_map, smem);
  } else {
    ptx::setmaxnreg_increase<kConsumerRegisters<kWideProducer>>();
    consume<kHeads, kN, kPaged, kEmit>(params, smem, warpgroup - 1);
  }
}

}  // namespace flashindexer::cuda::scoring
