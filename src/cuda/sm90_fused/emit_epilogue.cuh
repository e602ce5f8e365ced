// SPDX-License-Identifier: Apache-2.0
// The scoring kernel's emitting epilogue: the fused indexer's scan. Instead of storing its scores,
// the kernel tests each visible one against its row's gate (the very value mqa_logits would
// store) and appends the keys that pass to the row's candidate slots: queued per warp in shared
// memory (CandidateQueue, emit_queue.cuh) and placed in bulk, one atomic per row per flush.
// Decode tests in the consumer warps; the prefill scan hands its scores to three side warps (the
// emitters, emit_scores), so that the test stays off the tensor cores' path.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/sm90_fused/block_max.cuh"
#include "cuda/sm90_fused/emit_params.h"
#include "cuda/sm90_fused/emit_queue.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/consumer.cuh"
#include "cuda/sm90_scoring/params.h"
#include "cuda/sm90_scoring/schedule.cuh"

namespace flashindexer::cuda::fused {

using scoring::ItemInfo;
using scoring::kConsumerGroups;
using scoring::kLaneOwnedRows;
using scoring::kMaxRowsPerGroup;
using scoring::kTileKeys;
using scoring::TileFilter;
using scoring::TileRows;
using scoring::TileWalk;
using scoring::wait_for_item;

// Emitter `emitter` (producer warp emitter + 1) in the emitting prefill scan: tests the
// consumers' scores against the rows' gates and places the candidates (Traits::kSideWarps). It
// walks the items and steps as the consumers do and takes every third step, reads it from its
// consumer warpgroup's score buffer (rows of kScoreStride floats, key k of the tile at column k)
// and releases the buffer once read. The emitters must keep up with the tensor-core work (~1600
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
// L: the kernel's SharedLayout (layout.cuh) with the emitting Traits.
template <int kHeads, int kN, typename L>
__device__ __forceinline__ void emit_scores(const TileFilter& f, const EmitParams& e, uint8_t* smem,
                                            int emitter) {
  constexpr int kRows = kN / kHeads;
  constexpr int kLanesPerRow = 32 / kRows;
  constexpr int kVectors = kTileKeys / 4 / kLanesPerRow;  // float4 of the row per lane
  constexpr int kMine = 4 * kVectors;                     // scores per lane
  static_assert(L::Traits::kByEmitters && L::Traits::kTilesPerStep == 1 &&
                    kRows <= kMaxRowsPerGroup && 32 % kRows == 0,
                "emitters take one tile per step, a whole number of lanes per row");
  static_assert(kScoreBuffers >= 3 && kConsumerGroups == 2 && kEmitterWarps == 3,
                "an emitter's steps of a warpgroup lie within kScoreBuffers of each other");
  static_assert(L::Traits::kEntriesPerQueue >= kRows * kTileKeys,
                "a step's entries fit an empty queue");
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
      if (lo < hi) gate = __ldg(e.gate + row0 + row);
    }
    const RowGate row_gate(gate);
    // A source layer's blocks: whether every row of the item has its groups as blocks.
    const bool groups = e.block_max == nullptr || all_rows_in_groups(e, lo, hi);
    float* block_entries = e.block_max + (row0 + row) * e.block_pitch;
    uint32_t row_entries = 0;  // this row's entries in the queue (on every lane of the row)
    auto flush = [&] {
      const uint32_t mine =
          __shfl_sync(0xffffffffu, row_entries, min(lane, kRows - 1) * kLanesPerRow);
      reserve_counted<L, kRows>(e, queue, row0, mine, lane);
      write_queue<L, kRows>(e, queue, lane);
      row_entries = 0;
    };
    for (TileWalk walk(f, info.tile_begin); walk.tile < tile_end; ++step_count) {
      const int32_t tile = walk.tile;
      walk.next(f);
      if (static_cast<int>(step_count % kEmitterWarps) != emitter) continue;
      const uint32_t step = step_count / kConsumerGroups;  // of warpgroup step_count % 2
      const int slot = static_cast<int>(step_count % kConsumerGroups) * kScoreBuffers +
                       static_cast<int>(step % kScoreBuffers);
      ptx::mbarrier_wait(&barriers[EmitRegion<L>::kScoreFull + slot], (step / kScoreBuffers) & 1);
      // Vector v of this lane: the row's columns 4 (lane % kLanesPerRow) + 4 kLanesPerRow v + 0..3.
      const float* scores = reinterpret_cast<const float*>(smem + EmitRegion<L>::kScores +
                                                           slot * L::Traits::kScoreBufferBytes) +
                            row * kScoreStride + 4 * (lane % kLanesPerRow);
      const int32_t key0 = tile * kTileKeys + 4 * (lane % kLanesPerRow);
      // Score e of this lane is element e % 4 of vector e / 4 (its column, key - key0: column()).
      auto column = [](uint32_t e) { return static_cast<int>(4 * kLanesPerRow * (e / 4) + e % 4); };
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
      const bool in_range = tile_key0 >= lo && tile_key0 + kTileKeys <= hi;
      const bool inside = !row_gate.take_all && in_range;
      float group_max[kVectors];
      float group_second_max[kVectors];
      if (e.block_max != nullptr) {
        emitter_group_maxima<kLanesPerRow>(e, lo, hi, key0, values, in_range, groups, group_max,
                                           group_second_max);
      }
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
      if (queue.size + total > static_cast<uint32_t>(L::Traits::kEntriesPerQueue)) flush();
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
      ptx::mbarrier_arrive(&barriers[EmitRegion<L>::kScoreEmpty + slot]);
      if (e.block_max != nullptr) {
        fold_emitter_groups<kLanesPerRow>(e, block_entries, lo, hi, key0, group_max,
                                          group_second_max, in_range, groups, lane);
      }
    }
    __syncwarp();
    if (queue.size > 0) flush();
    ptx::fence_proxy_async_shared();  // as above; TMA refills this item's Q buffer
    ptx::mbarrier_arrive(&q_empty[buffer]);
  }
}

// The policy the scoring kernel takes as its Epilogue (kernel.cuh, consume).
struct EmitEpilogue {
  using Params = EmitParams;
  template <int kHeads, int kN, bool kPaged>
  using Traits = EmitTraits<kHeads, kN, kPaged>;

  template <typename L>
  __device__ __forceinline__ static void init_barriers(uint64_t* barriers) {
    for (int b = 0; b < kConsumerGroups * kScoreBuffers && L::Traits::kByEmitters; ++b) {
      ptx::mbarrier_init(&barriers[EmitRegion<L>::kScoreFull + b], 128);  // a consumer warpgroup
      ptx::mbarrier_init(&barriers[EmitRegion<L>::kScoreEmpty + b], 32);  // an emitter's lanes
    }
  }

  // Producer warps 1-3 of the prefill scan (Traits::kSideWarps).
  template <int kHeads, int kN, bool kPaged, typename L>
  __device__ __forceinline__ static void side_warp(const scoring::ScoreParams&, const TileFilter& f,
                                                   const EmitParams& e, uint8_t* smem,
                                                   int emitter) {
    emit_scores<kHeads, kN, L>(f, e, smem, emitter);
  }

  // The consumers' part: decode tests its scores and queues the candidates; prefill hands them
  // to the emitters through the score buffers.
  // The queue hooks work on a local copy of the queue, written back at their end, and take the
  // lane from threadIdx: the compiler then treats the queue as it treated a local of consume(),
  // where the test once lived, and lays out the queue arithmetic as it did there (with the
  // members used in place, the emitting decode kernels had 40 more instructions at N = 64).
  template <int kHeads, int kN, bool kPaged, typename L>
  struct Consumer {
    using T = typename L::Traits;
    using R = TileRows<kHeads, kN, T::kOneScorePerLane>;
    static constexpr bool kTests = !T::kByEmitters;
    // The MXFP4 formats' scans (decode) mark their NaN scores' rows for the fallback; the
    // preconverted prefill scan is the FP8 kernel's, and the gate marks its rows (gate.h).
    static constexpr bool kMarksNaN = L::Format::kConverts;
    static_assert(!kMarksNaN || kTests, "the consumers that test their scores mark them");
    // Entries one owned row's key rows may add (queue_candidate once per key row). The room is
    // checked per owned row, not per tile: a tile of H = 32 prefill (8 rows, two owned per lane)
    // may add 128, and flushing whenever that is not free flushed at every tile.
    static constexpr uint32_t kRowEntries = 32 * R::kKeyRowsPerLane;
    static_assert(kRowEntries <= kQueueEntries, "a row's candidates must fit the queue");
    const EmitParams& e;
    uint8_t* smem;
    int consumer;
    int lane;
    CandidateQueue<L> queue;
    float gate[R::kPerLane];  // loaded once per item: a load per step stalled the epilogue

    // An item's last candidates are written during the next item's first step, after its wgmma
    // is issued: the reservation's atomics then complete while the tensor cores run.
    __device__ __forceinline__ Consumer(const scoring::ScoreParams&, const TileFilter&,
                                        const EmitParams& e_, uint8_t* smem_, int consumer_,
                                        int warp, int lane_)
        : e(e_), smem(smem_), consumer(consumer_), lane(lane_), queue{smem_, 0, warp} {
      if (kTests && lane == 0) queue.meta()[0] = -1;
    }
    __device__ __forceinline__ void begin_row(int i, int32_t row0, int q, int32_t lo, int32_t hi) {
      gate[i] = kTests && lo < hi ? __ldg(e.gate + row0 + q) : 0.0f;
    }
    __device__ __forceinline__ void after_mma() {
      if (kTests) {
        CandidateQueue<L> queue = this->queue;
        const int lane = static_cast<int>(threadIdx.x % 32);
        if (queue_reserved(queue)) write_queue<L, R::kRows>(e, queue, lane);
        this->queue = queue;
      }
    }
    template <int kTilesPerStep, typename Owned>
    __device__ __forceinline__ void step(
        const scoring::ScoreParams&, const TileFilter&, const int32_t (&tile_of)[kTilesPerStep],
        int tiles, const Owned (&owned)[kTilesPerStep],
        const float (&half_scale)[kTilesPerStep][R::kKeyRowsPerLane],
        const int32_t (&lo)[R::kPerLane], const int32_t (&hi)[R::kPerLane], int32_t row0,
        int key_row, uint32_t my_tiles) {
      if constexpr (T::kByEmitters) {
        // The step's scores, every key of the tile (the emitter tests the visible range), to
        // this warpgroup's next score buffer.
        static_assert(kTilesPerStep == 1 && R::kKeyRowsPerLane == 2, "one tile per step");
        uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
        const uint32_t my_step = my_tiles - 1;
        const int slot = consumer * kScoreBuffers + static_cast<int>(my_step % kScoreBuffers);
        ptx::mbarrier_wait(&barriers[EmitRegion<L>::kScoreEmpty + slot],
                           ((my_step / kScoreBuffers) & 1) ^ 1);
        float* scores =
            reinterpret_cast<float*>(smem + EmitRegion<L>::kScores + slot * T::kScoreBufferBytes);
#pragma unroll
        for (int i = 0; i < R::kPerLane; ++i) {
          float* row_scores = scores + R::row(i, lane) * kScoreStride + key_row;
          row_scores[0] = owned[0][i][0] * half_scale[0][0];
          row_scores[8] = owned[0][i][1] * half_scale[0][1];
        }
        ptx::mbarrier_arrive(&barriers[EmitRegion<L>::kScoreFull + slot]);
      } else {
        CandidateQueue<L> queue = this->queue;
        const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (u >= tiles) break;
          const int32_t key0 = tile_of[u] * kTileKeys + key_row;
#pragma unroll
          for (int i = 0; i < R::kPerLane; ++i) {
            const int q = R::row(i, lane);
            if (queue.size > kQueueEntries - kRowEntries) {
              reserve_queue<L, R::kRows>(e, queue, row0, lane);
              write_queue<L, R::kRows>(e, queue, lane);
            }
            const RowGate row_gate(gate[i]);
#pragma unroll
            for (int r = 0; r < R::kKeyRowsPerLane; ++r) {
              const int32_t key = key0 + 8 * R::key_half(r, lane);
              const float score = owned[u][i][r] * half_scale[u][r];
              if constexpr (kMarksNaN) {
                const bool visible =
                    static_cast<uint32_t>(key - lo[i]) < static_cast<uint32_t>(hi[i] - lo[i]);
                if (visible && score != score) send_row_to_fallback(e, row0 + q);
              }
              queue_candidate(queue, q, row_gate, lo[i], hi[i], key, score, lane);
              if (e.block_max != nullptr) {
                fold_consumer_score(e, row0 + q, lo[i], hi[i], key, score,
                                    e.block_size == kGroupKeys, lane);
              }
            }
          }
        }
        this->queue = queue;
      }
    }
    __device__ __forceinline__ void end_item(int32_t row0) {
      if (kTests) {
        CandidateQueue<L> queue = this->queue;
        const int lane = static_cast<int>(threadIdx.x % 32);
        // A warpgroup without a step in this item may still hold the previous item's entries.
        if (queue_reserved(queue)) write_queue<L, R::kRows>(e, queue, lane);
        if (queue.size > 0) reserve_queue<L, R::kRows>(e, queue, row0, lane);
        this->queue = queue;
      }
    }
    __device__ __forceinline__ void finish() {
      if (kTests) {
        CandidateQueue<L> queue = this->queue;
        const int lane = static_cast<int>(threadIdx.x % 32);
        if (queue_reserved(queue)) write_queue<L, R::kRows>(e, queue, lane);
        this->queue = queue;
      }
    }
  };
};

}  // namespace flashindexer::cuda::fused
