// SPDX-License-Identifier: Apache-2.0
// The scoring kernel's producer (warpgroup 0, or its warp 0 when the epilogue has side warps):
// walks the CTA's work items, publishes each (schedule.cuh) and streams its key tiles by TMA
// into the ring of stages, in the keys' format (format_e4m3.cuh).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/layout.cuh"
#include "cuda/sm90_scoring/params.h"
#include "cuda/sm90_scoring/row_range.cuh"
#include "cuda/sm90_scoring/schedule.cuh"

namespace flashindexer::cuda::scoring {

// Loads the keys and scales of key tile `tile` of group `group` into one stage. kReadOnce: the
// cache pages are loaded with an L2 evict-first policy (each page is read by one CTA, once per
// call), so that the fused decode scan's candidates stay in L2 for the kernels after it: fused
// decode at batch 64 ran 1-5 % faster on the H200, while the dense pair was 0.3-0.6 % slower
// (docs/history/), so only the emitting instantiations use it (their Traits::kReadOnce).
template <bool kPaged, bool kReadOnce, typename Format>
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

  // Called by the whole producer warp; lane 0 issues the copies (a sparse tile's are issued by
  // one lane per block).
  __device__ __forceinline__ void load(int64_t group, int32_t tile, uint8_t* keys, float* scales,
                                       uint64_t* full, int lane) {
    if constexpr (Format::kSparseBlock > 0) {
      // Sparse by TMA (format_sparse.cuh's SparseBlocks, the MXFP4 sparse formats; the FP8 one
      // gathers with its lanes, produce): the group is one query row, its entries a row of
      // block_table with unit stride. Lane c reads the entry of the tile's block c (the tile's
      // entries are one 16- or 32-byte load), notes its place (note_block) and copies it; the
      // notes are made and the expected bytes set before any copy, so the arrive publishes the
      // notes and no copy can complete the stage's phase early.
      constexpr int kCopies = Format::kCopies;
      const int32_t block = tile * kCopies + lane;
      int32_t entry = 0;  // a tile never reaches past the row's entries (the end is inside)
      if (lane < kCopies && block < p.table_pages) {
        entry = p.block_table[group * p.table_stride_b + block];
      }
      if (lane < kCopies) Format::note_block(scales, lane, entry);
      __syncwarp();
      if (lane == 0) {
        ptx::mbarrier_arrive_expect_tx(full, Format::kTileCopyBytes);
      }
      __syncwarp();
      if (lane < kCopies) {
        Format::copy_block(keys, scales, key_map, scale_map, full, lane, entry);
      }
    } else if constexpr (kPaged) {
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
        ptx::mbarrier_arrive_expect_tx(full, Format::kLoadBytes);
#pragma unroll
        for (int c = 0; c < kTileKeys / 32; ++c) {
          if (c < copies) {
            Format::template copy_page<kReadOnce>(keys, scales, key_map, scale_map, full, c,
                                                  rows_per_copy, row_in_page, pages[c], read_once);
          }
        }
      }
    } else {
      if (lane == 0) {
        ptx::mbarrier_arrive_expect_tx(full, Format::kLoadBytes);
        Format::copy_packed(keys, scales, key_map, scale_map, full, tile * kTileKeys);
      }
    }
  }
};

// A converting format's raw rings (format_mxfp4.cuh): producer warp 0 loads every tile, both
// consumers' in step order, and warps 1-3 convert them into the consumers' stages. Stage s is
// converter s % kConverters's: the loader puts a tile into that converter's ring of kRawSlots
// slots, so each converter takes every occupant of its stages in order. (With entries dealt out
// round-robin instead, a converter could reach a stage's next occupant before another had
// converted the previous one, and its empty barrier, two phases behind, would pass at once.)
// Each slot carries an entry word written by the loading lane before its arrival (which
// publishes it): the stage (bits 0-6) and the parity its empty barrier is waited on with (bit 7);
// or a Q tile to convert into Q buffer kQueryBuffer's bit (ring 0: its converter publishes the
// item); or the end of the work.
//
// No wait closes a cycle: the oldest unconverted tile's converter has converted all its earlier
// entries; the tile is pushed (the loader only waits for a slot whose entry is older, or for a
// Q buffer, whose item's entries it has all pushed), and its stage's previous occupant, an
// earlier place of the same consumer, was converted before it, as was every earlier place, so
// the consumer frees the stage.
struct RawEntry {
  static constexpr uint32_t kStageMask = 0x7Fu;
  static constexpr uint32_t kEmptyParity = 1u << 7;
  static constexpr uint32_t kQuery = 1u << 8;
  static constexpr uint32_t kQueryBuffer = 1u << 9;
  static constexpr uint32_t kEnd = 1u << 10;
};

constexpr int kConverters = kProducerWarps - 1;

// A thread-gathering format's entry window for a warp whose own tiles are kStride apart
// (format_sparse.cuh); nothing for the others.
template <typename Format, int kStride, bool = Format::kThreadGather>
struct EntryWindowOf {
  struct type {};
};
template <typename Format, int kStride>
struct EntryWindowOf<Format, kStride, true> {
  using type = typename Format::template Window<kStride>;
};

template <typename L>
struct RawRing {
  using Format = typename L::Format;
  static constexpr uint32_t kSlots = L::kRawSlots;  // per converter
  static_assert(L::kStages <= 128, "a stage fits RawEntry::kStageMask");
  uint8_t* smem;

  // Barriers: every slot's full (its copies' bytes, count 1) and empty (the converter, count 1).
  __device__ __forceinline__ uint64_t* slot_full(int ring, uint32_t slot) const {
    return reinterpret_cast<uint64_t*>(smem + L::kBarriers) + L::kRawBarriers + ring * kSlots +
           slot;
  }
  __device__ __forceinline__ uint64_t* slot_empty(int ring, uint32_t slot) const {
    return slot_full(ring, slot) + kConverters * kSlots;
  }
  __device__ __forceinline__ uint8_t* slot_bytes(int ring, uint32_t slot) const {
    return smem + L::kRaw + (ring * kSlots + slot) * Format::kRawSlotBytes;
  }
  __device__ __forceinline__ uint32_t* slot_entry(int ring, uint32_t slot) const {
    return reinterpret_cast<uint32_t*>(smem + L::kRawEntries) + ring * kSlots + slot;
  }
};

// The loading side (producer warp 0): push(ring, entry, load) waits for the ring's next slot to
// be free, has lane 0 write the entry, then load(raw values, raw scales, the slot's full barrier)
// issues the copies (lane 0 arrives on the barrier with their bytes). Three counters, not an
// array: a register array indexed by the ring would live in local memory.
template <typename L>
struct RawLoader : RawRing<L> {
  uint32_t pushed0 = 0;
  uint32_t pushed1 = 0;
  uint32_t pushed2 = 0;
  static_assert(kConverters == 3, "one counter per converter");

  template <typename Load>
  __device__ __forceinline__ void push(int ring, uint32_t entry, int lane, Load&& load) {
    const uint32_t pushed = ring == 0 ? pushed0 : ring == 1 ? pushed1 : pushed2;
    const uint32_t slot = pushed % RawRing<L>::kSlots;
    ptx::mbarrier_wait(this->slot_empty(ring, slot), ((pushed / RawRing<L>::kSlots) & 1) ^ 1);
    if (lane == 0) *this->slot_entry(ring, slot) = entry;
    uint8_t* raw = this->slot_bytes(ring, slot);
    load(raw, reinterpret_cast<float*>(raw + L::Format::kRawValueBytes),
         this->slot_full(ring, slot));
    pushed0 += ring == 0 ? 1 : 0;
    pushed1 += ring == 1 ? 1 : 0;
    pushed2 += ring == 2 ? 1 : 0;
  }
  // A key tile for `stage`, into its converter's ring.
  template <typename Load>
  __device__ __forceinline__ void push_tile(uint32_t stage, uint32_t empty_parity, int lane,
                                            Load&& load) {
    push(static_cast<int>(stage % kConverters),
         stage | (empty_parity != 0 ? RawEntry::kEmptyParity : 0u), lane, load);
  }
  // The end of the work: an entry without copies in every ring.
  __device__ __forceinline__ void finish(int lane) {
#pragma unroll 1
    for (int ring = 0; ring < kConverters; ++ring) {
      push(ring, RawEntry::kEnd, lane, [&](uint8_t*, float*, uint64_t* slot_full) {
        if (lane == 0) ptx::mbarrier_arrive(slot_full);
      });
    }
  }
};

// The converting side (producer warp 1 + ring), its ring's entries until the end entry: each key
// tile into its stage once the stage is free, published on the stage's full barrier (count 1, no
// bytes); a Q tile into its Q buffer, published on q_full. FormatArgs: the format's parameters.
template <int kHeads, int kN, typename L, typename FormatArgs>
__device__ __forceinline__ void convert_ring(const ScoreParams& p, const FormatArgs& format_args,
                                             uint8_t* smem, int ring) {
  using Format = typename L::Format;
  constexpr uint32_t kSlots = L::kRawSlots;
  const int lane = threadIdx.x % 32;
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* full = barriers;
  uint64_t* empty = barriers + L::kStages;
  uint64_t* q_full = barriers + 2 * L::kStages;
  const ItemInfo* items = reinterpret_cast<const ItemInfo*>(smem + L::kItems);
  const RawRing<L> raw{smem};
  const auto* tables =
      reinterpret_cast<const uint2*>(smem + L::kRawEntries + Format::kTablesOffset);
  const uint32_t q_rows = kLaneOwnedRows<kHeads, kN> ? kN / kHeads : p.rows_per_group;
#pragma unroll 1
  for (uint32_t n = 0;; ++n) {
    const uint32_t slot = n % kSlots;
    ptx::mbarrier_wait(raw.slot_full(ring, slot), (n / kSlots) & 1);
    const uint32_t entry = *raw.slot_entry(ring, slot);
    if ((entry & RawEntry::kEnd) != 0) break;
    const bool query = (entry & RawEntry::kQuery) != 0;
    const int buffer = (entry & RawEntry::kQueryBuffer) != 0 ? 1 : 0;
    const uint32_t stage = entry & RawEntry::kStageMask;
    if (query) {
      Format::template convert_query<kHeads, kN>(
          smem + L::kQ + buffer * L::kQBytes,
          reinterpret_cast<float*>(smem + L::kWeights + buffer * kN * 4),
          smem + L::kQStaging + buffer * Format::template kQStagingBytes<kN>, tables, format_args,
          items[buffer].row0, p.rows, static_cast<int>(q_rows) * kHeads, lane);
    } else {
      ptx::mbarrier_wait(&empty[stage], (entry & RawEntry::kEmptyParity) != 0 ? 1 : 0);
      Format::convert_tile(smem + L::kKeys + stage * L::kTileBytes,
                           reinterpret_cast<float*>(smem + L::kScales + stage * L::kTileScaleBytes),
                           raw.slot_bytes(ring, slot), tables, format_args, lane);
    }
    // The e4m3 writes (generic proxy) before the consumers' wgmma (async proxy) reads them, and
    // the raw reads before the slot's next TMA write; every lane arrives for its own
    // (Format::kFillArrivals, kConverterArrivals).
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(query ? &q_full[buffer] : &full[stage]);
    ptx::mbarrier_arrive(raw.slot_empty(ring, slot));
  }
}

// publish_item for a converting format (producer warp 0): the packed Q rows come by TMA into the
// buffer's staging area with the weights, through a slot of ring 0, whose converter turns them
// into the Q tile, folds each vector's power of two into its weight and publishes the item on
// q_full. The staging area of a buffer is free once its Q buffer is: an item's conversion
// precedes its consumption. A format whose consumers convert the keys (kRegisterKeys) has no
// converting warps: warp 0 waits for its own copies (raw barrier 0) and converts the Q tile
// itself, once per work item (a decode CTA has one or two), while warps 1-3 go on loading keys.
template <int kHeads, int kN, typename L, typename FormatArgs>
__device__ __forceinline__ void publish_converted_item(
    const ScoreParams& p, const FormatArgs& format_args, RawLoader<L>& ring, ItemInfo* items,
    uint64_t* q_full, uint64_t* q_empty, uint32_t item_count, const CUtensorMap* q_map,
    const CUtensorMap* w_map, uint8_t* smem, int32_t row0, int rows, int32_t tile_begin,
    int32_t tile_end, int32_t lo, int32_t hi, uint32_t q_bytes, int lane) {
  using Format = typename L::Format;
  const int buffer = item_count & 1;
  ptx::mbarrier_wait(&q_empty[buffer], ((item_count >> 1) & 1) ^ 1);
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
  }
  uint8_t* staging = smem + L::kQStaging + buffer * Format::template kQStagingBytes<kN>;
  auto copy_q = [&](uint64_t* landed) {
    if (lane == 0) {
      ptx::mbarrier_arrive_expect_tx(landed, q_bytes);
      ptx::tma_load_3d(staging, q_map, landed, 0, 0, row0);
      ptx::tma_load_2d(smem + L::kWeights + buffer * kN * 4, w_map, landed, 0, row0);
    }
  };
  if constexpr (Format::kConvertsKeys) {
    const uint32_t entry = RawEntry::kQuery | (buffer != 0 ? RawEntry::kQueryBuffer : 0u);
    ring.push(0, entry, lane, [&](uint8_t*, float*, uint64_t* slot_full) { copy_q(slot_full); });
  } else {
    uint64_t* landed = reinterpret_cast<uint64_t*>(smem + L::kBarriers) + L::kRawBarriers;
    copy_q(landed);
    ptx::mbarrier_wait(landed, item_count & 1);
    const auto* tables =
        reinterpret_cast<const uint2*>(smem + L::kRawEntries + Format::kTablesOffset);
    const int q_rows = kLaneOwnedRows<kHeads, kN> ? kN / kHeads : p.rows_per_group;
    Format::template convert_query<kHeads, kN>(
        smem + L::kQ + buffer * L::kQBytes,
        reinterpret_cast<float*>(smem + L::kWeights + buffer * kN * 4), staging, tables,
        format_args, row0, p.rows, q_rows * kHeads, lane);
    // As convert_ring's: the e4m3 writes before the wgmma reads them, every lane's own.
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(&q_full[buffer]);
  }
}

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
  __device__ __forceinline__ bool any_tile(const TileFilter& f) const {
    return first < last && TileWalk(f, first / kTileKeys).tile < (last + kTileKeys - 1) / kTileKeys;
  }
};

// L: the kernel's SharedLayout (layout.cuh), with the epilogue's Traits.
// FormatArgs: a converting format's parameters (KernelParams' third member), else unused.
template <int kHeads, int kN, bool kPaged, typename L, typename FormatArgs = int>
__device__ __forceinline__ void produce(const ScoreParams& p, const TileFilter& f,
                                        const CUtensorMap* q_map, const CUtensorMap* w_map,
                                        const CUtensorMap* key_map, const CUtensorMap* scale_map,
                                        uint8_t* smem, const FormatArgs& format_args = {}) {
  using T = typename L::Traits;
  using Format = typename L::Format;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;  // producer warp, 0 .. kProducerWarps - 1
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* full = barriers;
  uint64_t* empty = barriers + L::kStages;
  uint64_t* q_full = barriers + 2 * L::kStages;
  uint64_t* q_empty = q_full + 2;
  ItemInfo* items = reinterpret_cast<ItemInfo*>(smem + L::kItems);

  TileLoader<kPaged, T::kReadOnce, Format> loader{p, key_map, scale_map};
  // A converting format: warp 0 loads every tile into the raw rings, warps 1-3 convert them
  // (convert_ring). One whose consumers convert the keys (kRegisterKeys) has the four warps load
  // the key tiles into the stages, as FP8's loaders do, and warp 0 convert the Q tiles.
  static_assert(!Format::kConverts || T::kSideWarps == 0, "converters are the producer warps");
  if constexpr (Format::kConvertsKeys) {
    if (warp > 0) {
      convert_ring<kHeads, kN, L>(p, format_args, smem, warp - 1);
      return;
    }
  }
  RawLoader<L> ring{{smem}};  // a converting format's (unused otherwise)
  // The Q copies bring whole tiles of kN / kHeads rows when the rows are lane-owned (a group of 3
  // decode rows brings a 4th, computed and dropped), rows_per_group rows otherwise.
  const uint32_t q_rows = kLaneOwnedRows<kHeads, kN> ? kN / kHeads : p.rows_per_group;
  // (A converting format's Q rows come packed: two values a byte.)
  const uint32_t q_bytes = (q_rows * (Format::kConverts ? kHeadDim / 2 : kHeadDim) +
                            static_cast<uint32_t>(p.rows_per_group) * 4) *
                           kHeads;
  constexpr int kTilesPerStep = L::kTilesPerStep;
  // Each consumer warpgroup's tiles go to its own half of the ring, at their place in it: a
  // stage is only ever read by one warpgroup, which reads its tiles in order, so a barrier's
  // parity never stands for two phases. (With one shared ring, a warpgroup running a whole ring
  // ahead of the other -- easy once candidate emission makes epilogues uneven -- would take a
  // stale phase for a fresh one.) Warp 2 c + (place % 2) loads consumer c's tiles, so each
  // warp's tiles of a half ring are two places apart: the empty barrier it waits on is then never
  // two phases behind (its parity would pass a wait one pass early). Taking turns over all tiles
  // did that: with uneven steps a warp could go many places without a tile of one half, run
  // ahead on the other half, and load into a stage whose previous tile had not been consumed.
  // With an epilogue's side warps (producer warps 1-3; one tile per step), warp 0 alone loads
  // both consumers' tiles in step order.
  // (A converting format's warp 0 is a single loader too.)
  constexpr bool kOneLoader = T::kSideWarps > 0 || Format::kConvertsKeys;
  static_assert(!kOneLoader || !Format::kThreadGather, "a gathering warp loads its own places");
  // A gathering format's entries of this warp's coming tiles: its tiles of an item are a step
  // pair of the two consumers apart.
  typename EntryWindowOf<Format, kConsumerGroups * kTilesPerStep>::type window;
  const int consumer = warp / 2;  // (a single loader: both)
  uint32_t step_count = 0;        // consumer steps so far (as consume counts them)
  uint32_t place = 0;        // tiles given to this warp's consumer (a single loader: consumer 0)
  uint32_t other_place = 0;  // a single loader: tiles given to consumer 1
  // Loads the tile at consumer c's place `at` if it is this warp's, and moves to the next place.
  auto take_place = [&](int c, uint32_t& at, int64_t group, int32_t tile) {
    if (kOneLoader || static_cast<int>(at & 1) == warp % 2) {
      const uint32_t stage = c * L::kHalfStages + at % L::kHalfStages;
      const uint32_t empty_parity = ((at / L::kHalfStages) & 1) ^ 1;
      if constexpr (Format::kConvertsKeys) {
        ring.push_tile(stage, empty_parity, lane,
                       [&](uint8_t* raw, float* raw_scales, uint64_t* raw_full) {
                         loader.load(group, tile, raw, raw_scales, raw_full, lane);
                       });
      } else {
        ptx::mbarrier_wait(&empty[stage], empty_parity);
        uint8_t* keys = smem + L::kKeys + stage * L::kTileBytes;
        auto* scales = reinterpret_cast<float*>(smem + L::kScales + stage * L::kTileScaleBytes);
        if constexpr (Format::kThreadGather) {
          const int slot = window.slot(p, group, tile, lane);
          Format::gather(keys, scales, &full[stage], window.current, slot, format_args, lane);
        } else {
          loader.load(group, tile, keys, scales, &full[stage], lane);
        }
      }
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
    const int32_t walk_begin = TileWalk(f, tile_begin).tile;

    if constexpr (Format::kConverts) {
      if (warp == 0) {
        publish_converted_item<kHeads, kN, L>(
            p, format_args, ring, items, q_full, q_empty, item_count, q_map, w_map, smem,
            static_cast<int32_t>(row0), rows, tile_begin, tile_end, lo, hi, q_bytes, lane);
      }
    } else if (warp == 0) {
      publish_item<kHeads, kN, L>(items, q_full, q_empty, item_count, q_map, w_map, smem,
                                  static_cast<int32_t>(row0), rows, tile_begin, tile_end, lo, hi,
                                  q_bytes, lane);
    }
    // The item's steps are kTilesPerStep tiles of the walk each, alternating between the
    // consumers: a warp visits only its consumer's steps, found by arithmetic on the walk (a
    // single loader visits all).
    const int32_t tiles = TileWalk::count(f, tile_begin, tile_end);
    const uint32_t steps = (tiles + kTilesPerStep - 1) / kTilesPerStep;
    if constexpr (Format::kConvertsKeys) {
      // Both consumers' tiles in step order, kTilesPerStep a step (fewer at the item's end).
      int32_t tile = walk_begin;
      for (uint32_t s = 0; s < steps; ++s) {
        const bool first = (step_count + s) % kConsumerGroups == 0;
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (s * kTilesPerStep + u < static_cast<uint32_t>(tiles)) {
            // (Two calls, not one through a conditional reference: that put the counters in
            // local memory.)
            if (first) {
              take_place(0, place, group, tile);
            } else {
              take_place(1, other_place, group, tile);
            }
            tile = TileWalk::advance(f, tile, 1);
          }
        }
      }
    } else if constexpr (kOneLoader) {
      static_assert(kTilesPerStep == 1, "side warps take one tile per step");
      int32_t tile = walk_begin;
      for (uint32_t s = 0; s < steps; ++s) {
        if ((step_count + s) % kConsumerGroups == 0) {
          take_place(0, place, group, tile);
        } else {
          take_place(1, other_place, group, tile);
        }
        tile = TileWalk::advance(f, tile, 1);
      }
    } else {
      const uint32_t first_step = (consumer + kConsumerGroups - step_count % kConsumerGroups) %
                                  kConsumerGroups;  // this consumer's first step of the item
      int32_t step_tile = TileWalk::advance(f, walk_begin, first_step * kTilesPerStep);
      for (uint32_t s = first_step; s < steps; s += kConsumerGroups) {
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (s * kTilesPerStep + u < static_cast<uint32_t>(tiles)) {
            take_place(consumer, place, group, TileWalk::advance(f, step_tile, u));
          }
        }
        step_tile = TileWalk::advance(f, step_tile, kConsumerGroups * kTilesPerStep);
      }
    }
    step_count += steps;
    ++item_count;
  };
  if constexpr (kPaged) {
    // Decode: this CTA's equal share of all requests' key tiles (schedule.cuh).
    for_each_share_piece(p, lane, [&](int64_t group, int32_t tile_begin, int32_t tile_end) {
      if constexpr (Format::kSparseBlock == 0) {
        loader.load_window(group, (tile_begin * kTileKeys) >> p.page_shift, lane);
      }
      const int64_t row0 = group * p.rows_per_group;
      const ItemKeys<kPaged, 32> keys(p, row0, group_rows(row0),
                                      static_cast<int64_t>(tile_begin) * kTileKeys,
                                      static_cast<int64_t>(tile_end) * kTileKeys, lane);
      if (keys.any_tile(f)) run_item(group, keys.lo, keys.hi, keys.first, keys.last);
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
      uint32_t pending = __ballot_sync(0xffffffffu, lane % kRows == 0 && keys.any_tile(f));
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
  if constexpr (Format::kConvertsKeys) ring.finish(lane);
  if (warp == 0) {
    const int buffer = item_count & 1;
    ptx::mbarrier_wait(&q_empty[buffer], ((item_count >> 1) & 1) ^ 1);
    if (lane == 0) items[buffer].row0 = -1;
    if (lane < Format::kConverterArrivals) ptx::mbarrier_arrive(&q_full[buffer]);
  }
}

}  // namespace flashindexer::cuda::scoring
