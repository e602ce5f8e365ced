// SPDX-License-Identifier: Apache-2.0
// The work schedule of the scoring kernel: which key tiles of a work item are walked (TileWalk,
// as TileFilter asks), how a consumer step takes them (take_step), the decode share, and the item
// channel by which the producer hands each work item to the consumers and to an epilogue's side
// warps (ItemInfo, publish_item, wait_for_item).
//
// Decode: every CTA streams the same number of key tiles.  The requests' key tiles are laid end to
// end in request order, and CTA c takes tiles [c T / G, (c + 1) T / G) of the T in all (G CTAs): a
// contiguous share that may start and end inside a request and span several. Decode is bound by
// reading the cache, so the CTA with the most tiles sets the time; work items of a fixed number of
// keys (as prefill keeps, for its L2 reuse) left CTAs uneven with ragged lengths and short items at
// batch 1. On the H200, against those items: ragged batches 4-14 % faster, batch 1 x 131072
// keys 10.5 -> 9.0 us, the fused scan 8 % faster (fewer queue hand-overs); equal lengths within
// their spread (the dense indexer at 64 x 131072 keys 1.5-2.5 % slower in three runs, not
// explained; docs/history/).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/params.h"
#include "cuda/sm90_scoring/row_range.cuh"

namespace flashindexer::cuda::scoring {

// One published work item. row0 < 0 ends the CTA's work.
struct ItemInfo {
  int32_t row0;
  int32_t rows;
  int32_t tile_begin;  // the TileWalk of key tiles (64 keys) from tile_begin, below tile_end
  int32_t tile_end;
  int32_t lo[kMaxRowsPerGroup];  // visible keys [lo, hi) of each row (empty: lo == hi)
  int32_t hi[kMaxRowsPerGroup];
};

// The key tiles of a work item, in order: every tile from `begin` (tile_stride 1), the sampled
// ones (t % tile_stride == 0), or all but those (skip_sampled). tile_stride is a power of two,
// so the walk holds nothing but the tile (registers are scarce in the N = 256 consumers).
struct TileWalk {
  int32_t tile;

  __device__ __forceinline__ TileWalk(const TileFilter& p, int32_t begin) : tile(begin) {
    const int32_t mask = p.tile_stride - 1;
    if (p.skip_sampled) {
      if ((tile & mask) == 0) ++tile;
    } else {
      tile = (tile + mask) & ~mask;
    }
  }
  __device__ __forceinline__ void next(const TileFilter& p) {
    if (!p.skip_sampled) {
      tile += p.tile_stride;
    } else if ((++tile & (p.tile_stride - 1)) == 0) {
      ++tile;
    }
  }
  // The walk's tile m places after `from` (a tile of the walk). Skipping the sampled tiles, m is
  // at most tile_stride - 2 (the stride is 32 or more), so one sampled tile at most lies between.
  __device__ __forceinline__ static int32_t advance(const TileFilter& p, int32_t from, int32_t m) {
    if (!p.skip_sampled) return from + (m << p.tile_shift);
    const int32_t to = from + m;
    return to + ((to >> p.tile_shift) - (from >> p.tile_shift));
  }
  // The number of tiles of the walk in [begin, end), begin <= end.
  __device__ __forceinline__ static int32_t count(const TileFilter& p, int32_t begin, int32_t end) {
    const int32_t sampled = ((end - 1) >> p.tile_shift) - ((begin - 1) >> p.tile_shift);
    return p.skip_sampled ? end - begin - sampled : sampled;
  }
};

// Takes a step's tiles off the walk into tile_of: the next kTilesPerStep, fewer at the end of the
// item; returns how many. Callers hold walk.tile < tile_end. With one tile per step, that tile is
// taken unconditionally, so that the compiler sees the step's epilogue run without divergence
// checks (prefill 456 -> 441 SASS instructions per step); the two-tile steps of decode keep the
// counted form, which measured faster for them (H64 b64 x 131072: 315 against 350 us), and
// with every tile taken (tile_stride 1) count without walking.
template <int kTilesPerStep>
__device__ __forceinline__ int take_step(TileWalk& walk, const TileFilter& p, int32_t tile_end,
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

// Publishes one work item (producer warp 0): waits until its Q buffer is free, writes the
// ItemInfo and starts the Q tile and weights copies.
// L: the kernel's SharedLayout (layout.cuh).
template <int kHeads, int kN, typename L>
__device__ __forceinline__ void publish_item(ItemInfo* items, uint64_t* q_full, uint64_t* q_empty,
                                             uint32_t item_count, const CUtensorMap* q_map,
                                             const CUtensorMap* w_map, uint8_t* smem, int32_t row0,
                                             int rows, int32_t tile_begin, int32_t tile_end,
                                             int32_t lo, int32_t hi, uint32_t q_bytes, int lane) {
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
// The key tiles of decode request `group`: up to its rows' last visible key (with one length
// per request, the last row's).
__device__ __forceinline__ int32_t request_tiles(const ScoreParams& p, int32_t group) {
  const int32_t* lens = p.context_lens + group * p.lens_stride_b;
  int32_t last = lens[0];
  if (p.lens_2d) {
#pragma unroll 1
    for (int j = 1; j < p.rows_per_group; ++j) last = max(last, lens[j * p.lens_stride_j]);
  }
  return (clamp_decode_end(p, last) + kTileKeys - 1) / kTileKeys;
}

// Calls piece(group, tile_begin, tile_end) for each request's part of this CTA's share, in
// order. Called by a whole warp (the calls are warp-uniform). One pass over the lengths for the
// total, with every lane's loads in flight together; one in request order, 32 at a time, to the
// request the share starts in; then request by request (the loads hit L1), keeping only three
// counters across the calls: the producer runs on few registers. This is the start of every
// decode call (a few us before the first key copy at batch 1), so it avoids 64-bit divisions.
template <typename Piece>
__device__ __forceinline__ void for_each_share_piece(const ScoreParams& p, int lane,
                                                     Piece&& piece) {
  int64_t total = 0;
#pragma unroll 4
  for (int32_t group = lane; group < p.groups; group += 32) total += request_tiles(p, group);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    total += __shfl_xor_sync(0xffffffffu, total, offset);
  }
  // total x c / G, in 32 bits when total x G fits them (a 64-bit division is a long call).
  auto bound = [total](uint32_t c) -> int64_t {
    if (total <= static_cast<int64_t>(UINT32_MAX / gridDim.x)) {
      return static_cast<uint32_t>(total) * c / gridDim.x;
    }
    return total * c / gridDim.x;
  };
  const int64_t share_begin = bound(blockIdx.x);
  int64_t remaining = bound(blockIdx.x + 1) - share_begin;
  if (remaining == 0) return;
  int32_t group = 0;
  int32_t skip = 0;  // tiles of `group` before the share
  int64_t base = 0;  // tiles of the requests before this batch of 32
  for (int32_t group0 = 0;; group0 += 32) {
    const int32_t mine = group0 + lane;
    // 32 requests' tiles fit an int32 (each has fewer than 2^25: width < 2^31).
    const int32_t tiles = mine < p.groups ? request_tiles(p, mine) : 0;
    // Tiles of this batch's requests up to and including this one.
    const int32_t through = warp_inclusive_scan(tiles);
    // The first request whose tiles end after share_begin holds the share's first tile.
    const uint32_t past = __ballot_sync(0xffffffffu, base + through > share_begin);
    if (past != 0) {
      const int owner = __ffs(past) - 1;
      group = group0 + owner;
      skip = static_cast<int32_t>(share_begin - base -
                                  __shfl_sync(0xffffffffu, through - tiles, owner));
      break;
    }
    base += __shfl_sync(0xffffffffu, through, 31);
  }
  while (remaining > 0) {  // the share's tiles lie in requests group .. groups - 1
    const int32_t take =
        static_cast<int32_t>(min(static_cast<int64_t>(request_tiles(p, group) - skip), remaining));
    if (take > 0) piece(group, skip, skip + take);
    remaining -= max(take, 0);
    skip = 0;
    ++group;
  }
}

}  // namespace flashindexer::cuda::scoring
