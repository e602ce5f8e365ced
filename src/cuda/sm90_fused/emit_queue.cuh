// SPDX-License-Identifier: Apache-2.0
// The emitting epilogue's (emit_epilogue.cuh) shared memory and candidate queues: who tests the
// scores, the traits the scoring kernel's layout reads (steps, score buffers, queues), where the
// region lies, and a warp's queue of candidates with its entries, the gate test and the flush to
// the rows' global slots.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/rank_key.cuh"
#include "cuda/sm90_fused/emit_params.h"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/consumer.cuh"

namespace flashindexer::cuda::fused {

using scoring::kConsumerGroups;
using scoring::kMaxRowsPerGroup;
using scoring::kTileKeys;

// Who tests the scores against the gate. Prefill: three producer warps (emitters), which take the
// steps in turn and read the consumers' finished scores from shared memory (kScoreBuffers per
// consumer warpgroup); producer warp 0 alone loads both warpgroups' tiles. Prefill is bound by the
// tensor cores, and the test, vote and queue work in the consumers' epilogue delayed their next
// wgmma: the emitting scan took 1.15x (H = 64) and 1.2x (H = 32) the storing kernel's time. One
// emitter per warpgroup kept up at H = 64 but not at H = 32, whose tiles (8 rows) have twice the
// scores for the same tensor-core time; with three, fused prefill at H = 32 is 7-16 % faster and H
// = 64 no slower (H200, docs/history/). Decode keeps the test in its consumer warps, each with its
// own queue: it is bound by reading the cache, which wants every producer warp loading.
constexpr int kEmitterWarps = 3;

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
// Floats per row of a score buffer: the consumer lanes of a quad (rows c, keys k) on distinct
// banks.
constexpr int kScoreStride = kTileKeys + 8;

// The shared bytes and barriers of one instantiation (SharedLayout keeps them past the items).
template <int kHeads, int kN, bool kPaged>
struct EmitTraits {
  static constexpr bool kByEmitters = !kPaged;
  static constexpr int kSideWarps = kByEmitters ? kEmitterWarps : 0;
  // Steps: the emitting N <= 64 scans (fused decode at next_n 1 with H = 64, next_n 1-2 with
  // H = 32) take four tiles per step: the per-step work (barriers, queue checks, bookkeeping)
  // then spreads over twice the tiles, and fused decode at 64 x 131072 keys ran 5-7 % faster on
  // the H200. The storing N = 64 kernel keeps two: four was no faster there and lost 0.5 us at
  // batch 1 (docs/history/).
  static constexpr int kTilesPerStep = kN <= 64 ? 4 : scoring::kTilesPerStepFor<kN>;
  // With MXFP4 register keys (SharedLayout), whose A operands a step holds (16 registers a
  // tile): four tiles at N = 64 serialized the wgmma for want of registers, and two at N = 128
  // (H = 32, lane-owned rows) spilled 12 bytes.
  static constexpr int kRegisterKeyTilesPerStep = kN <= 64 ? 2 : 1;
  static constexpr bool kOneScorePerLane = true;  // TileRows: one (row, key row) per lane
  static constexpr bool kReadOnce = kPaged;       // TileLoader: the cache read evict-first
  // The queues: one per consumer warp, or one per emitter with the same bytes.
  static constexpr int kQueues = kByEmitters ? kEmitterWarps : kConsumerWarps;
  static constexpr int kQueueCapacity = kQueueEntries * kConsumerWarps / kEmitterWarps;
  static constexpr int kEntriesPerQueue = kByEmitters ? kQueueCapacity : kQueueEntries;
  // Per queue: the queued entries and the reservation (reserve_queue).
  static constexpr int kQueueBytes =
      (kQueues * (kEntriesPerQueue * 8 + kQueueMetaWords * 4) + 15) / 16 * 16;
  // A score buffer: one tile's scores, a row of kScoreStride floats per query row.
  static constexpr int kScoreBufferBytes = kN / kHeads * kScoreStride * 4;
  static constexpr int kScoreBytes =
      kByEmitters ? kConsumerGroups * kScoreBuffers * kScoreBufferBytes : 0;
  static constexpr int kSharedBytes = kScoreBytes + kQueueBytes;
  // Score buffers' full and empty barriers.
  static constexpr int kBarriers = kByEmitters ? 2 * kConsumerGroups * kScoreBuffers : 0;
};

// Where the epilogue's bytes and barriers lie: the score buffers, the queues' entries, their
// reservations; the score buffers' full, then empty barriers.
template <typename L>
struct EmitRegion {
  using T = typename L::Traits;
  static constexpr int kScores = L::kEpilogue;
  static constexpr int kQueueKeys = kScores + T::kScoreBytes;
  static constexpr int kQueueMeta = kQueueKeys + T::kQueues * T::kEntriesPerQueue * 8;
  static constexpr int kScoreFull = L::kEpilogueBarriers;
  static constexpr int kScoreEmpty = kScoreFull + kConsumerGroups * kScoreBuffers;
  static_assert(kScores % 16 == 0, "the emitters read the score buffers as float4");
};

// One consumer warp's candidate queue (EmitParams::gate): entries (queue_entry) in shared
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
    return reinterpret_cast<uint64_t*>(smem + EmitRegion<L>::kQueueKeys) +
           warp * L::Traits::kEntriesPerQueue;
  }
  // [0]: the row0 of the reserved entries' item, or -1; [1 + q]: row slot q's place.
  __device__ __forceinline__ int32_t* meta() const {
    return reinterpret_cast<int32_t*>(smem + EmitRegion<L>::kQueueMeta) + warp * kQueueMetaWords;
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

// An MXFP4 scan's NaN score may be an out-of-span vector's mark (format_mxfp4.cuh), whose exact
// score only the fallback's fix-up computes: its row's count goes past the slots, so the select
// leaves the row to the fallback (the dense pair, fix-up included). Rare: one atomic per such
// visible score.
__device__ __forceinline__ void send_row_to_fallback(const EmitParams& e, int64_t row) {
  atomicMax(e.candidate_counts + row, e.candidate_capacity + 1);
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
__device__ __forceinline__ void reserve_counted(const EmitParams& e, const CandidateQueue<L>& queue,
                                                int32_t row0, uint32_t mine, int lane) {
  if (lane < kRows) {
    auto* row_count = reinterpret_cast<uint32_t*>(e.candidate_counts + row0 + lane);
    reinterpret_cast<uint32_t*>(queue.meta() + 1)[lane] =
        mine > 0 ? atomicAdd(row_count, mine) : 0u;
  }
  if (lane == 0) queue.meta()[0] = row0;
  __syncwarp();
}

template <typename L, int kRows>
__device__ __forceinline__ void reserve_queue(const EmitParams& e, const CandidateQueue<L>& queue,
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
  reserve_counted<L, kRows>(e, queue, row0, mine, lane);
}

template <typename L>
__device__ __forceinline__ bool queue_reserved(const CandidateQueue<L>& queue) {
  return queue.meta()[0] >= 0;
}

template <typename L, int kRows>
__device__ __forceinline__ void write_queue(const EmitParams& e, CandidateQueue<L>& queue,
                                            int lane) {
  const uint64_t* keys = queue.keys();
  int32_t* meta = queue.meta();
  uint32_t* places = reinterpret_cast<uint32_t*>(meta + 1);
  const int32_t row0 = meta[0];
  const auto capacity = static_cast<uint32_t>(e.candidate_capacity);
  auto write = [&](uint64_t entry, int q, uint32_t at) {
    if (at < capacity) {
      e.candidates[static_cast<int64_t>(row0 + q) * capacity + at] = entry_rank_key(entry);
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

}  // namespace flashindexer::cuda::fused
