// SPDX-License-Identifier: Apache-2.0
// Histogram select (the fast path). Candidates are rank keys in per-warp slices of a shared
// buffer: warp w owns buffer[w * slice, w * slice + count(w)). A round histograms the candidates
// inside a rank-key range [lo, hi] into 2048 bins of 2^shift keys each (the bin of a key is
// min((key - lo) >> shift, 2047)), finds the bin B that holds the wanted rank with one block
// scan, and either resolves B exactly (<= kBruteForceMax keys: each counts the keys above it) or
// narrows [lo, hi] to B and repeats: 11 bits per round over the occupied range only (digits
// common to all candidates are never spent on), usually one round for the survivors of a
// sampled threshold, whose first histogram is even built while streaming. The result is the
// cutoff rank key K: exactly `want` candidates have key >= K. Rank keys are distinct, so K (and
// the compacted set) do not depend on the order in which atomics are served.
//
// Also the sampled threshold (sample_threshold) that bounds a segment's survivors.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rank_key.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/keys.cuh"

namespace flashindexer::cuda::topk {

struct Candidates {
  const uint64_t* buffer;
  int slice;               // slots per warp
  const uint32_t* counts;  // per-warp counts, or nullptr: dense [0, valid)
  uint32_t valid;
  __device__ __forceinline__ uint32_t count(int warp) const {
    if (counts != nullptr) return counts[warp];
    const int64_t left = static_cast<int64_t>(valid) - static_cast<int64_t>(warp) * slice;
    return left <= 0 ? 0u
                     : (left > slice ? static_cast<uint32_t>(slice) : static_cast<uint32_t>(left));
  }
};

// Slots per warp for `valid` dense keys: every warp gets a share, a multiple of 32.
__device__ __forceinline__ int dense_slice(uint32_t valid) {
  const int per_warp = static_cast<int>((valid + kWarps - 1) / kWarps);
  return per_warp < 32 ? 32 : (per_warp + 31) / 32 * 32;
}

__device__ __forceinline__ int shift_for_range(uint64_t width) {
  const int bits = width == 0 ? 0 : 64 - __clzll(static_cast<long long>(width));
  return bits > kHistBits ? bits - kHistBits : 0;
}

__device__ __forceinline__ uint32_t hist_bin(uint64_t key, uint64_t lo, int shift) {
  const uint64_t bin = (key - lo) >> shift;
  return bin > kHistBins - 1 ? static_cast<uint32_t>(kHistBins - 1) : static_cast<uint32_t>(bin);
}

// Adds 1 to bins[bin] for every lane with take. A plain shared atomic per lane: grouping equal
// bins first with __match_any_sync measured far slower (its latency grows with the number of
// distinct values in the warp, the common case), and same-bin lanes only serialize a few cycles.
__device__ __forceinline__ void warp_hist_add(uint32_t* bins, uint32_t bin, bool take) {
  if (take) atomicAdd(&bins[bin], 1u);
}

struct HistShared {
  uint32_t bins[kHistBins];
  uint32_t scan[kWarps + 1];
  uint32_t warp_min[kWarps];
  uint32_t warp_max[kWarps];
  uint32_t boundary_bin;
  uint32_t above;   // keys in bins above the boundary bin
  uint32_t in_bin;  // keys in the boundary bin
  uint32_t gathered;
  uint64_t cutoff;
  uint64_t gather[kBruteForceMax + 8];    // + 8: the unrolled scan reads past m
  uint8_t gathered_warp[kBruteForceMax];  // the warp whose slice held gather[i]
  uint32_t taken[kWarps];                 // select_dense: each warp's keys at or above the cutoff
};

// The highest of the kHistBinsPerThread bins thread t owns: 2047 - 4t (down to 2044 - 4t).
__device__ __forceinline__ int top_owned_bin() {
  return kHistBins - 1 - kHistBinsPerThread * static_cast<int>(threadIdx.x);
}

// Finds the bin B (from the top) with above < target <= above + bins[B] of a histogram held in
// registers: counts[j] is bin top_owned_bin() - j. Needs 1 <= target <= sum of bins. Writes
// hs.boundary_bin, hs.above, hs.in_bin. Contains barriers.
__device__ inline void find_hist_boundary_of(const uint32_t (&counts)[kHistBinsPerThread],
                                             HistShared& hs, uint32_t target) {
  const int top = top_owned_bin();
  uint32_t sum = 0;
#pragma unroll
  for (int j = 0; j < kHistBinsPerThread; ++j) sum += counts[j];
  uint32_t total;
  const uint32_t before = block_exclusive_scan(sum, hs.scan, total);
  if (before < target && target <= before + sum) {
    uint32_t above = before;
    bool found = false;
#pragma unroll
    for (int j = 0; j < kHistBinsPerThread; ++j) {
      if (!found && above + counts[j] >= target) {
        found = true;
        hs.boundary_bin = static_cast<uint32_t>(top - j);
        hs.above = above;
        hs.in_bin = counts[j];
      } else if (!found) {
        above += counts[j];
      }
    }
  }
  __syncthreads();
}

// find_hist_boundary_of over hs.bins.
__device__ inline void find_hist_boundary(HistShared& hs, uint32_t target) {
  uint32_t counts[kHistBinsPerThread];
  const int top = top_owned_bin();
#pragma unroll
  for (int j = 0; j < kHistBinsPerThread; ++j) counts[j] = hs.bins[top - j];
  find_hist_boundary_of(counts, hs, target);
}

// The rank key with exactly remaining - 1 of hs.gather[0, m) above it (m <= kBruteForceMax keys,
// distinct, gathered before a barrier; 1 <= remaining <= m): each key counts the keys above it,
// 8 independent loads per step (a dependent chain of shared loads would be latency-bound).
// Contains barriers.
__device__ inline uint64_t brute_force_cutoff(HistShared& hs, uint32_t m, uint32_t remaining) {
  // Slots m..m+7 are read as 0 (ranks below all).
  for (uint32_t i = threadIdx.x; i < kBruteForceMax + 8; i += kThreads) {
    if (i >= m) hs.gather[i] = 0;
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
    const uint64_t key = hs.gather[i];
    uint32_t greater = 0;
    for (uint32_t q = 0; q < m; q += 8) {
#pragma unroll
      for (int u = 0; u < 8; ++u) greater += hs.gather[q + u] > key ? 1u : 0u;
    }
    if (greater == remaining - 1) hs.cutoff = key;
  }
  __syncthreads();
  return hs.cutoff;
}

// Block reduce of per-warp values written to hs.warp_min / warp_max (after a barrier).
__device__ __forceinline__ uint32_t reduce_warp_max(const HistShared& hs) {
  uint32_t m = 0;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = m > hs.warp_max[w] ? m : hs.warp_max[w];
  return m;
}
__device__ __forceinline__ uint32_t reduce_warp_min(const HistShared& hs) {
  uint32_t m = 0xffffffffu;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = m < hs.warp_min[w] ? m : hs.warp_min[w];
  return m;
}

// The cutoff K of the `want` largest candidates inside [lo, hi] (every candidate above hi counts
// as taken by the caller): 1 <= want <= candidates in [lo, hi]. hist_ready: hs.bins already
// holds this round's histogram for (lo, shift) (built while streaming). warp_taken (optional,
// kWarps words of shared memory): gets each warp's candidates >= K, counted in the pass that
// gathers the boundary bin, which saves compact_cutoff's counting pass (place_taken). Contains
// barriers.
__device__ inline uint64_t select_cutoff(const Candidates& c, uint32_t want, uint64_t lo,
                                         uint64_t hi, int shift, bool hist_ready, HistShared& hs,
                                         uint32_t* warp_taken = nullptr) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const uint64_t* slice = c.buffer + static_cast<int64_t>(warp) * c.slice;
  const uint32_t mine = c.count(warp);
  for (;;) {
    if (!hist_ready) {
      for (int b = threadIdx.x; b < kHistBins; b += kThreads) hs.bins[b] = 0;
      __syncthreads();
      // A loop per lane (no warp-wide step): the slice's address steps by a register add, where
      // the guarded load of a warp-wide step rebuilt it from the CTA's shared window each time.
      for (uint32_t i = lane; i < mine; i += 32) {
        const uint64_t key = slice[i];
        warp_hist_add(hs.bins, hist_bin(key, lo, shift), key >= lo && key <= hi);
      }
      __syncthreads();
    }
    hist_ready = false;
    if (threadIdx.x == 0) hs.gathered = 0;
    find_hist_boundary(hs, want);
    const uint32_t bin = hs.boundary_bin;
    const uint32_t in_bin = hs.in_bin;
    const uint32_t remaining = want - hs.above;
    const uint64_t bin_lo = lo + (static_cast<uint64_t>(bin) << shift);
    uint64_t bin_hi = hi;
    if (bin < kHistBins - 1 && hi - bin_lo > (uint64_t{1} << shift) - 1) {
      bin_hi = bin_lo + ((uint64_t{1} << shift) - 1);
    }
    if (in_bin <= kBruteForceMax) {
      uint32_t above = 0;
      for (uint32_t i = lane; i < mine; i += 32) {
        const uint64_t key = slice[i];
        if (key >= bin_lo && key <= bin_hi) {
          const uint32_t at = atomicAdd(&hs.gathered, 1u);
          hs.gather[at] = key;
          hs.gathered_warp[at] = static_cast<uint8_t>(warp);
        }
        above += key > bin_hi ? 1u : 0u;
      }
      if (warp_taken != nullptr) {
        above = __reduce_add_sync(0xffffffffu, above);
        if (lane == 0) warp_taken[warp] = above;
      }
      __syncthreads();
      const uint32_t gathered = hs.gathered;
      const uint64_t cutoff = brute_force_cutoff(hs, gathered, remaining);
      if (warp_taken != nullptr) {
        for (uint32_t i = threadIdx.x; i < gathered; i += kThreads) {
          if (hs.gather[i] >= cutoff) atomicAdd(&warp_taken[hs.gathered_warp[i]], 1u);
        }
        __syncthreads();
      }
      return cutoff;
    }
    lo = bin_lo;
    hi = bin_hi;
    want = remaining;
    shift = shift_for_range(hi - lo);
  }
}

// Calls place(offset + i, key) for this warp's candidates with key >= cutoff, i = 0, 1, ... in
// slot order, 32 slots at a time (placed by ballots).
template <typename Place>
__device__ __forceinline__ void place_warp_cutoff(const Candidates& c, uint64_t cutoff,
                                                  uint32_t offset, Place& place) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const uint64_t* slice = c.buffer + static_cast<int64_t>(warp) * c.slice;
  const uint32_t mine = c.count(warp);
  const uint32_t lower_lanes = (1u << lane) - 1;
  for (uint32_t j = 0; j < mine; j += 32) {
    const uint32_t i = j + lane;
    const uint64_t key = i < mine ? slice[i] : 0;
    const bool take = i < mine && key >= cutoff;
    const uint32_t ballot = __ballot_sync(0xffffffffu, take);
    if (take) place(offset + __popc(ballot & lower_lanes), key);
    offset += __popc(ballot);
  }
}

// Places the candidates with key >= cutoff at positions 0, 1, ... in slot order (warp by warp,
// by ballots and a block scan of the warps' counts: deterministic), calling place(position, key)
// for each; returns their count. Contains barriers.
template <typename Place>
__device__ inline uint32_t compact_cutoff_with(const Candidates& c, uint64_t cutoff,
                                               uint32_t* scan_scratch, Place place) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const uint64_t* slice = c.buffer + static_cast<int64_t>(warp) * c.slice;
  const uint32_t mine = c.count(warp);
  uint32_t warp_total = 0;
  for (uint32_t j = 0; j < mine; j += 32) {
    const uint32_t i = j + lane;
    const bool take = i < mine && slice[i] >= cutoff;
    warp_total += __popc(__ballot_sync(0xffffffffu, take));
  }
  uint32_t total;
  const uint32_t warp_offset =
      block_exclusive_scan(lane == 0 ? warp_total : 0u, scan_scratch, total);
  place_warp_cutoff(c, cutoff, __shfl_sync(0xffffffffu, warp_offset, 0), place);
  __syncthreads();
  return total;
}

// compact_cutoff_with when each warp's count is known (warp_taken, from select_cutoff): no
// counting pass, no block scan. Returns the count. No barrier: for places outside shared memory.
template <typename Place>
__device__ inline uint32_t place_taken(const Candidates& c, uint64_t cutoff,
                                       const uint32_t* warp_taken, Place place) {
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const uint32_t count = lane < kWarps ? warp_taken[lane] : 0u;
  const uint32_t before = __reduce_add_sync(0xffffffffu, lane < warp ? count : 0u);
  place_warp_cutoff(c, cutoff, before, place);
  return __reduce_add_sync(0xffffffffu, count);
}

// place_taken of the candidates' indices to out[(offset + i) * stride]: candidates in index
// order give an unsorted answer (or its part after `offset` earlier keys).
__device__ __forceinline__ uint32_t place_taken_indices(const Candidates& c, uint64_t cutoff,
                                                        const uint32_t* warp_taken, int32_t* out,
                                                        int64_t stride, uint32_t offset) {
  return place_taken(c, cutoff, warp_taken, [&](uint32_t i, uint64_t key) {
    out[(offset + i) * stride] = rank_key_index(key);
  });
}

// compact_cutoff_with into selection[0, count).
__device__ __forceinline__ uint32_t compact_cutoff(const Candidates& c, uint64_t cutoff,
                                                   uint64_t* selection, uint32_t* scan_scratch) {
  return compact_cutoff_with(c, cutoff, scan_scratch,
                             [&](uint32_t position, uint64_t key) { selection[position] = key; });
}

// The cutoff of the `want` largest of c's candidates (score keys within [min_key, max_key]): the
// rank key K with exactly min(want, candidates) of them >= K (0: all; all ones: none). Each
// warp's count of those goes to hs.taken. Contains barriers.
__device__ inline uint64_t dense_cutoff(const Candidates& c, uint32_t want, uint32_t min_key,
                                        uint32_t max_key, HistShared& hs) {
  if (want > 0 && want < c.valid) {
    const uint64_t lo = static_cast<uint64_t>(min_key) << 32;
    const uint64_t hi = (static_cast<uint64_t>(max_key) << 32) | 0xffffffffu;
    return select_cutoff(c, want, lo, hi, shift_for_range(hi - lo), false, hs, hs.taken);
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) hs.taken[warp] = want > 0 ? c.count(warp) : 0u;
  __syncthreads();
  // No key: +inf is 0xff800000, so no rank key is all ones.
  return want > 0 ? 0 : ~uint64_t{0};
}

// Selects the `want` largest of c's candidates (score keys within [min_key, max_key]) into
// selection[0, count) in slot order; returns count (= min(want, candidates)). The cutoff's
// search counts each warp's keys above it, so the compaction needs no counting pass.
__device__ inline uint32_t select_dense(const Candidates& c, uint32_t want, uint32_t min_key,
                                        uint32_t max_key, uint64_t* selection, HistShared& hs) {
  const uint64_t cutoff = dense_cutoff(c, want, min_key, max_key, hs);
  const uint32_t count = place_taken(
      c, cutoff, hs.taken, [&](uint32_t position, uint64_t key) { selection[position] = key; });
  __syncthreads();
  return count;
}

// A lower bound T of the sample's rank-th largest key, at most 2^10 key steps below it: two
// 11-bit histogram rounds (key bits 31..21, then 20..10 inside the boundary bin), instead of a
// full select. With coarse_ok, the first round's boundary bin's lowest key when at most 2 rank
// sample keys lie at or above it (the second round is then skipped: up to twice the survivors
// for one histogram round less). Also the sample's largest key. 1 <= rank <= sampled. Contains
// barriers.
__device__ inline void sample_threshold(const uint32_t* sample, int sampled, uint32_t rank,
                                        bool coarse_ok, HistShared& hs, uint32_t& threshold,
                                        uint32_t& sample_max) {
  const int warp = threadIdx.x >> 5;
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) hs.bins[b] = 0;
  __syncthreads();
  uint32_t largest = 0;
  // A loop per thread: with a warp-wide step and a guarded load ptxas rebuilt the bins' shared
  // address at every key (11 instructions per key against 5; the fused gate 89 -> 84 us at H32
  // prefill 4096 x 131072).
  for (int i = threadIdx.x; i < sampled; i += kThreads) {
    const uint32_t key = sample[i];
    largest = largest > key ? largest : key;
    warp_hist_add(hs.bins, key >> 21, true);
  }
  largest = __reduce_max_sync(0xffffffffu, largest);
  if ((threadIdx.x & 31) == 0) hs.warp_max[warp] = largest;
  __syncthreads();
  find_hist_boundary(hs, rank);
  const uint32_t top_bin = hs.boundary_bin;
  const uint32_t remaining = rank - hs.above;
  sample_max = reduce_warp_max(hs);
  if (coarse_ok && hs.above + hs.in_bin <= 2 * rank) {
    threshold = top_bin << 21;
    return;
  }
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) hs.bins[b] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < sampled; i += kThreads) {
    const uint32_t key = sample[i];
    if ((key >> 21) == top_bin) atomicAdd(&hs.bins[(key >> 10) & (kHistBins - 1)], 1u);
  }
  __syncthreads();
  find_hist_boundary(hs, remaining);
  threshold = (top_bin << 21) | (hs.boundary_bin << 10);
}

}  // namespace flashindexer::cuda::topk
