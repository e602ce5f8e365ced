// The decode schedule: every CTA streams the same number of key tiles.
//
// The requests' key tiles are laid end to end in request order, and CTA c takes tiles
// [c T / G, (c + 1) T / G) of the T in all (G CTAs): a contiguous share that may start and end
// inside a request and span several. Decode is bound by reading the cache, so the CTA with the
// most tiles sets the time; work items of a fixed number of keys (as prefill keeps, for its L2
// reuse) left CTAs uneven with ragged lengths and short items at batch 1. On the H200, against
// those items: ragged batches 4-14 % faster, batch 1 x 131072 keys 10.5 -> 9.0 us, the fused
// scan 8 % faster (fewer queue hand-overs); equal lengths within their spread (the dense indexer
// at 64 x 131072 keys 1.5-2.5 % slower in three runs, not explained; docs/benchmarks.md).
#pragma once

#include <cstdint>

#include "cuda/common/warp_scan.cuh"
#include "cuda/scoring/row_range.cuh"
#include "cuda/scoring/score_params.h"

namespace flashindexer::cuda::scoring {

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
