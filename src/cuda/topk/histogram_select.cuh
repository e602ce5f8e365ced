// Device building blocks of the GPU top-k, shared by the segment and merge kernels.
//
// Keys: scores are compared as score keys and rank keys (cuda/common/rank_key.cuh). Rank keys of a
// row are distinct, so the k largest are exactly the reference's set, whatever the algorithm
// that finds them.
//
// The histogram select (select_cutoff, below) serves the fast paths; the radix select serves the
// exact fallback over global memory.
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
#include "cuda/topk/params.h"
#include "cuda/topk/sort_rows.cuh"

namespace flashindexer::cuda::topk {

// The keys a row of `visible` keys selects: min(visible, k).
__device__ __forceinline__ uint32_t selected_count(int64_t visible, int k) {
  return static_cast<uint32_t>(visible < k ? visible : static_cast<int64_t>(k));
}

struct SelectState {
  uint64_t prefix;
  uint64_t mask;
  uint32_t remaining;  // keys still to take from the boundary bin
  int done;            // the boundary bin is taken whole: the criterion is exact
};

// Scores as stored: fp32, or bf16 bits (the upper half of the fp32 pattern).
template <typename T>
struct Scores;
template <>
struct Scores<float> {
  static constexpr int kPerVector = 4;
  static constexpr int kVectorsPerStep = kFloatVectorsPerStep;
  __device__ __forceinline__ static uint32_t key(const float* row, int64_t i) {
    return score_key(__float_as_uint(__ldg(row + i)));
  }
  __device__ __forceinline__ static uint32_t vector_bits(const uint4& v, int e) {
    return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
  // A sample group: 4 consecutive keys, one aligned load.
  using Group = uint4;
  __device__ __forceinline__ static void group_keys(const uint4& g, uint32_t (&keys)[4]) {
    keys[0] = score_key(g.x);
    keys[1] = score_key(g.y);
    keys[2] = score_key(g.z);
    keys[3] = score_key(g.w);
  }
};
template <>
struct Scores<uint16_t> {
  static constexpr int kPerVector = 8;
  static constexpr int kVectorsPerStep = kBf16VectorsPerStep;
  __device__ __forceinline__ static uint32_t key(const uint16_t* row, int64_t i) {
    return score_key(static_cast<uint32_t>(__ldg(row + i)) << 16);
  }
  // The fp32 bit pattern of the bf16 value in half h of a 32-bit word (h = 0: the low half).
  __device__ __forceinline__ static uint32_t half_bits(uint32_t word, int h) {
    return h ? (word & 0xffff0000u) : (word << 16);
  }
  __device__ __forceinline__ static uint32_t vector_bits(const uint4& v, int e) {
    const int w = e >> 1;
    return half_bits(w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w, e & 1);
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
  using Group = uint2;
  __device__ __forceinline__ static void group_keys(const uint2& g, uint32_t (&keys)[4]) {
    keys[0] = score_key(half_bits(g.x, 0));
    keys[1] = score_key(half_bits(g.x, 1));
    keys[2] = score_key(half_bits(g.y, 0));
    keys[3] = score_key(half_bits(g.y, 1));
  }
};

// Exclusive prefix of `value` over the CTA in thread order; `total` gets the sum.
// scratch: kWarps + 1 words of shared memory. Contains barriers: call from all threads.
__device__ __forceinline__ uint32_t block_exclusive_scan(uint32_t value, uint32_t* scratch,
                                                         uint32_t& total) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t inclusive = warp_inclusive_scan(value);
  if (lane == 31) scratch[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const uint32_t sum = lane < kWarps ? scratch[lane] : 0u;
    const uint32_t prefix = warp_inclusive_scan(sum);
    if (lane < kWarps) scratch[lane] = prefix - sum;
    if (lane == kWarps - 1) scratch[kWarps] = prefix;
  }
  __syncthreads();
  const uint32_t result = scratch[warp] + inclusive - value;
  total = scratch[kWarps];
  __syncthreads();
  return result;
}

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

// Writes -1 to columns [count, k) of a row's answer (out: the row), with the CTA's threads.
__device__ __forceinline__ void write_padding(const Params& p, int32_t* out, uint32_t count) {
  for (int i = static_cast<int>(count) + threadIdx.x; i < p.k; i += kThreads) {
    out[i * p.out_stride1] = -1;
  }
}

// Writes a row's answer: the indices of selection[0, count), which holds them in ascending index
// order (sorted best first here when asked), then -1 up to k. Columns >= k are not touched.
// Contains barriers when sorting.
__device__ inline void write_row(const Params& p, int64_t row, uint64_t* selection,
                                 uint32_t count) {
  int32_t* out = p.out + row * p.out_stride0;
  if (p.sorted && count > 1) {
    sort_selection_descending(selection, count, [&](int i, uint64_t key) {
      out[i * p.out_stride1] = rank_key_index(key);
    });
  } else {
    for (int i = threadIdx.x; i < static_cast<int>(count); i += kThreads) {
      out[i * p.out_stride1] = rank_key_index(selection[i]);
    }
  }
  write_padding(p, out, count);
}

// The 16-byte groups (4 words, 128 keys) of the bitmap window that starts `left` keys before a
// span's end: all bitmap_words / 4 of them, or fewer for the span's last window.
__device__ __forceinline__ int window_groups(int64_t left, int bitmap_words) {
  const int64_t needed = (left + 127) / 128;
  return needed < bitmap_words / 4 ? static_cast<int>(needed) : bitmap_words / 4;
}

__device__ __forceinline__ void clear_groups(uint4* groups, int group_count) {
  for (int g = threadIdx.x; g < group_count; g += kThreads) groups[g] = make_uint4(0, 0, 0, 0);
}

// Writes the indices of a CTA's selected keys, all in [0, span), to out[i * stride],
// i = 0, 1, ..., in ascending index order (the order of every unsorted answer), when they are held
// in another order: the exact fallback's selection. (The fast paths' survivors are in index order
// already, segment_steps.cuh.) One bit per key in `bitmap` (bitmap_words words of shared memory,
// a multiple of 4, 16-byte aligned; spans longer than 32 x bitmap_words keys take several
// windows) and a block scan of the words' counts, where sorting the keys by index is ~66
// dependent steps. mark(bitmap, first, keys), called by every thread once a window is clear, sets
// (atomicOr) bit i - first of bitmap for each selected key with index i in [first, first + keys).
// Returns the count written. Contains barriers.
template <typename Mark>
__device__ inline uint32_t write_marked_in_index_order(int32_t* out, int64_t stride, int64_t span,
                                                       uint32_t* bitmap, int bitmap_words,
                                                       uint32_t* scan_scratch, Mark&& mark) {
  const int64_t window_keys = int64_t{bitmap_words} * 32;
  uint4* groups = reinterpret_cast<uint4*>(bitmap);  // 4 words (128 keys) per 16-byte access
  uint32_t written = 0;
  for (int64_t window = 0; window < span; window += window_keys) {
    const int group_count = window_groups(span - window, bitmap_words);
    clear_groups(groups, group_count);
    __syncthreads();
    const uint32_t first_index = static_cast<uint32_t>(window);
    mark(bitmap, first_index, static_cast<uint32_t>(group_count) * 128);
    __syncthreads();
    // Warp w owns groups [w * per_warp, (w + 1) * per_warp), lane l the l-th of every 32 (16-byte
    // loads without bank conflicts); the warp's indices of a step are consecutive, so its stores
    // are coalesced. One warp scan per 128 words: with a scan per 32 words, prefill 4096 x
    // 131072 k = 2048 took 0.633 ms against 0.628 (bf16 0.561 against 0.552; H200). (Scattered
    // stores of a thread owning 8 consecutive words, or indices staged in shared memory first,
    // measured no better than coalesced ones.)
    const int per_warp = (group_count + kWarps * 32 - 1) / (kWarps * 32) * 32;
    const int lane = threadIdx.x & 31;
    const int first = (threadIdx.x >> 5) * per_warp;
    const int last = first + per_warp < group_count ? first + per_warp : group_count;
    uint32_t mine = 0;
    for (int g = first + lane; g < last; g += 32) {
      const uint4 words = groups[g];
      mine += __popc(words.x) + __popc(words.y) + __popc(words.z) + __popc(words.w);
    }
    mine = __reduce_add_sync(0xffffffffu, mine);
    uint32_t total;
    const uint32_t warp_offset = block_exclusive_scan(lane == 0 ? mine : 0u, scan_scratch, total);
    uint32_t place = written + __shfl_sync(0xffffffffu, warp_offset, 0);
    for (int step = first; step < last; step += 32) {
      const int g = step + lane;
      const uint4 words = g < last ? groups[g] : make_uint4(0, 0, 0, 0);
      const uint32_t count = __popc(words.x) + __popc(words.y) + __popc(words.z) + __popc(words.w);
      const uint32_t inclusive = warp_inclusive_scan(count);
      // A bit loop per 32-bit word with a stepped pointer: 11 instructions per index where 64-bit
      // words and an index multiply took 27 (ncu, the fused select at H32 prefill).
      int32_t* to = out + static_cast<int64_t>(place + inclusive - count) * stride;
      const int32_t index = static_cast<int32_t>(first_index + static_cast<uint32_t>(g) * 128);
      auto write_bits = [&](uint32_t bits, int32_t first_bit) {
        for (; bits != 0; bits &= bits - 1) {
          *to = first_bit + __ffs(bits) - 1;
          to += stride;
        }
      };
      write_bits(words.x, index);
      write_bits(words.y, index + 32);
      write_bits(words.z, index + 64);
      write_bits(words.w, index + 96);
      place += __shfl_sync(0xffffffffu, inclusive, 31);
    }
    written += total;
    if (window + window_keys < span) __syncthreads();  // the words are read before the next clear
  }
  return written;
}

// The bit of a key with index `index` in a window of `keys` keys from `first` (mark's part).
__device__ __forceinline__ void mark_index(uint32_t* bitmap, uint32_t first, uint32_t keys,
                                           uint32_t index) {
  const uint32_t at = index - first;
  if (at < keys) atomicOr(&bitmap[at / 32], 1u << (at % 32));
}

// Writes a row's answer from selection[0, count) in any order: sorted best first when asked,
// else in ascending index order (write_marked_in_index_order over the row's row_count keys, with
// bitmap_words words at `bitmap`), then -1 up to k. Contains barriers.
__device__ inline void write_row_from_any_order(const Params& p, int64_t row, uint64_t* selection,
                                                uint32_t count, int64_t row_count, uint32_t* bitmap,
                                                int bitmap_words, uint32_t* scan_scratch) {
  if (p.sorted) {
    write_row(p, row, selection, count);
    return;
  }
  int32_t* out = p.out + row * p.out_stride0;
  write_marked_in_index_order(out, p.out_stride1, row_count, bitmap, bitmap_words, scan_scratch,
                              [&](uint32_t* bits, uint32_t first, uint32_t keys) {
                                for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
                                  mark_index(bits, first, keys,
                                             static_cast<uint32_t>(rank_key_index(selection[i])));
                                }
                              });
  write_padding(p, out, count);
}

// ---------------------------------------------------------------------------------------------
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

// Visible range [start, start + count) of a row, clamped to [0, width].
__device__ inline void row_range(const Params& p, int64_t row, int64_t& start, int64_t& count) {
  int64_t begin = 0;
  int64_t end;
  if (p.ks != nullptr) {
    begin = p.ks[row * p.ks_stride];
    end = p.ke[row * p.ke_stride];
  } else if (p.lengths_columns > 0) {
    end = p.lengths[(row / p.lengths_columns) * p.lengths_stride0 +
                    (row % p.lengths_columns) * p.lengths_stride1];
  } else if (p.next_n == 1) {
    end = p.lengths[row * p.lengths_stride0];
  } else {
    end = static_cast<int64_t>(p.lengths[(row / p.next_n) * p.lengths_stride0]) - p.next_n +
          row % p.next_n + 1;
  }
  begin = begin < 0 ? 0 : (begin > p.width ? p.width : begin);
  end = end > p.width ? p.width : end;
  start = begin;
  count = end > begin ? end - begin : 0;
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
