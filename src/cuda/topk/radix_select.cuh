// SPDX-License-Identifier: Apache-2.0
// Radix select: the exact fallback over global memory (when a sampled threshold let too few or
// too many keys through).
//
// Radix select finds, over any set of rank keys (in shared or global memory, given by a
// functor), a (prefix, mask) pair such that exactly `rank` keys satisfy
// (key & mask) >= prefix, 8 bits per pass from the top, stopping as soon as the boundary bin is
// taken whole. Compaction writes the selected keys to a dense array in slot order, with a
// block scan, so positions never depend on the order in which atomics were served: the output is
// bit-identical from run to run.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"  // HistShared: its bins and scan serve here too
#include "cuda/topk/keys.cuh"

namespace flashindexer::cuda::topk {

struct SelectState {
  uint64_t prefix;
  uint64_t mask;
  uint32_t remaining;  // keys still to take from the boundary bin
  int done;            // the boundary bin is taken whole: the criterion is exact
};

// Warp 0: the bin (descending from 255) that holds the state's remaining-th key; update state.
__device__ __forceinline__ void find_boundary_bin(const uint32_t* hist, SelectState* state,
                                                  int shift) {
  const int lane = threadIdx.x & 31;
  constexpr int kBinsPerLane = kRadixBins / 32;
  uint32_t counts[kBinsPerLane];
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerLane; ++j) {
    counts[j] = hist[kRadixBins - 1 - lane * kBinsPerLane - j];
    sum += counts[j];
  }
  const uint32_t remaining = state->remaining;
  const uint32_t inclusive = warp_inclusive_scan(sum);
  const uint32_t exclusive = inclusive - sum;
  __syncwarp();  // every lane has read the state before one lane rewrites it
  if (exclusive < remaining && remaining <= inclusive) {
    uint32_t above = exclusive;
    uint32_t bin = 0;
    uint32_t in_bin = 0;
    bool found = false;
#pragma unroll
    for (int j = 0; j < kBinsPerLane; ++j) {
      if (!found && above + counts[j] >= remaining) {
        found = true;
        bin = kRadixBins - 1 - lane * kBinsPerLane - j;
        in_bin = counts[j];
      } else if (!found) {
        above += counts[j];
      }
    }
    const uint32_t left = remaining - above;
    state->prefix |= static_cast<uint64_t>(bin) << shift;
    state->mask |= static_cast<uint64_t>(kRadixBins - 1) << shift;
    state->remaining = left;
    state->done = in_bin == left;
  }
}

// Radix select over `slots` slots; get(i, key) returns whether slot i holds a key. Needs
// 1 <= rank <= number of keys. Digits from bit 63 down to kLowestShift (56: one pass on the top
// byte ... 0: all 64 bits, always exact for distinct keys; 32: the 32-bit score key only, which
// may end with `remaining` keys to take from a class of equal scores). hist: 2 x kRadixBins.
// kAggregate: warp-aggregate the histogram atomics with __match_any_sync: scores concentrate in a
// few top-digit bins (any real distribution does), and same-address shared atomics serialize.
template <int kLowestShift, bool kAggregate, typename Get>
__device__ void radix_select(Get get, int64_t slots, uint32_t rank, uint32_t* hist,
                             SelectState* state) {
  if (threadIdx.x == 0) {
    state->prefix = 0;
    state->mask = 0;
    state->remaining = rank;
    state->done = 0;
  }
  int pass = 0;
  for (int shift = 64 - kRadixBits; shift >= kLowestShift; shift -= kRadixBits, ++pass) {
    uint32_t* bins = hist + (pass & 1) * kRadixBins;  // double buffered: no barrier to clear
    for (int b = threadIdx.x; b < kRadixBins; b += kThreads) bins[b] = 0;
    __syncthreads();
    if (state->done) break;
    const uint64_t prefix = state->prefix;
    const uint64_t mask = state->mask;
    for (int64_t i = threadIdx.x; i < slots; i += kThreads) {
      uint64_t key = 0;
      const bool take = get(i, key) && (key & mask) == prefix;
      const uint32_t bin = static_cast<uint32_t>(key >> shift) & (kRadixBins - 1);
      if constexpr (kAggregate) {
        const uint32_t peers = __match_any_sync(__activemask(), take ? bin : 0xffffffffu);
        if (take && (threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&bins[bin], __popc(peers));
      } else {
        if (take) atomicAdd(&bins[bin], 1u);
      }
    }
    __syncthreads();
    if (threadIdx.x < 32) find_boundary_bin(bins, state, shift);
  }
  __syncthreads();
}

// The exact fallback: the `want` best of the n keys at scores[0, n) (1 <= want <= n), read from
// global memory, into selection[0, want) as rank keys with indices index_base + i. A radix
// select on the 32-bit score keys (<= 4 reads) finds the boundary score, then one read in index
// order takes every key above it and the lowest-index keys equal to it, placed by block scans
// (deterministic). Contains barriers.
template <typename T>
__device__ inline void select_from_global(const T* scores, int64_t n, uint32_t want,
                                          uint32_t index_base, uint64_t* selection, HistShared& hs,
                                          SelectState* state_shared) {
  using S = Scores<T>;
  SelectState& state = *state_shared;
  auto get_global = [&](int64_t i, uint64_t& key) {
    key = static_cast<uint64_t>(S::key(scores, i)) << 32;
    return true;
  };
  radix_select<32, true>(get_global, n, want, hs.bins, state_shared);
  const bool whole_bin = state.done != 0;
  const uint32_t boundary_mask = static_cast<uint32_t>(state.mask >> 32);
  const uint32_t boundary = static_cast<uint32_t>(state.prefix >> 32);
  const uint32_t ties_wanted = whole_bin ? 0u : state.remaining;
  const uint32_t above_wanted = want - ties_wanted;
  uint32_t above_taken = 0;  // CTA-uniform running totals
  uint32_t ties_seen = 0;
  for (int64_t base = 0; base < n; base += kThreads) {
    const int64_t i = base + threadIdx.x;
    const uint32_t key = i < n ? S::key(scores, i) : 0u;
    const bool above = i < n && (whole_bin ? (key & boundary_mask) >= boundary : key > boundary);
    const bool tie = i < n && !whole_bin && key == boundary;
    uint32_t both;
    const uint32_t before =
        block_exclusive_scan((above ? 1u : 0u) | (tie ? 1u << 16 : 0u), hs.scan, both);
    const uint32_t above_position = above_taken + (before & 0xffffu);
    const uint32_t tie_rank = ties_seen + (before >> 16);
    if (above) {
      selection[above_position] = rank_key(key, index_base + static_cast<uint32_t>(i));
    }
    if (tie && tie_rank < ties_wanted) {
      selection[above_wanted + tie_rank] = rank_key(key, index_base + static_cast<uint32_t>(i));
    }
    above_taken += both & 0xffffu;
    ties_seen += both >> 16;
    // Every key above the boundary and every tie wanted are placed: nothing after them is.
    // (A row of equal scores ends after its first `want` keys, not after the whole row.)
    if (above_taken >= above_wanted && ties_seen >= ties_wanted) break;
  }
  __syncthreads();
}

}  // namespace flashindexer::cuda::topk
