// Device building blocks of the GPU top-k, shared by the segment and merge kernels.
//
// Keys. A score becomes a 32-bit key that orders like the total order of topk.h (larger key =
// better): the full fp32 bits (bf16 is the upper half of fp32), -0.0 mapped to +0.0, every NaN
// mapped to 0, below -inf. A *rank key* appends the inverted relative index,
// (key << 32) | ~index, so that equal scores rank the smaller index first and all rank keys of a
// row are distinct: the k largest rank keys are exactly the reference's set, whatever the
// algorithm that finds them.
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

#include "cuda/topk/config.h"
#include "cuda/topk/launch.h"

namespace flashindexer::cuda::topk {

struct SelectState {
  uint64_t prefix;
  uint64_t mask;
  uint32_t remaining;  // keys still to take from the boundary bin
  int done;            // the boundary bin is taken whole: the criterion is exact
};

__device__ __forceinline__ uint32_t score_key(uint32_t bits) {
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  bits = bits == 0x80000000u ? 0u : bits;
  const uint32_t key = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return is_nan ? 0u : key;
}

__device__ __forceinline__ uint64_t rank_key(uint32_t key, uint32_t index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~index);
}

__device__ __forceinline__ int32_t rank_key_index(uint64_t rank) {
  return static_cast<int32_t>(~static_cast<uint32_t>(rank));
}

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
  __device__ __forceinline__ static uint32_t vector_key(const uint4& v, int e) {
    return score_key(vector_bits(v, e));
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
};
template <>
struct Scores<uint16_t> {
  static constexpr int kPerVector = 8;
  static constexpr int kVectorsPerStep = kBf16VectorsPerStep;
  __device__ __forceinline__ static uint32_t key(const uint16_t* row, int64_t i) {
    return score_key(static_cast<uint32_t>(__ldg(row + i)) << 16);
  }
  __device__ __forceinline__ static uint32_t vector_bits(const uint4& v, int e) {
    const int w = e >> 1;
    const uint32_t word = w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w;
    return (e & 1) ? (word & 0xffff0000u) : (word << 16);
  }
  __device__ __forceinline__ static uint32_t vector_key(const uint4& v, int e) {
    return score_key(vector_bits(v, e));
  }
  __device__ __forceinline__ static float vector_value(const uint4& v, int e) {
    return __uint_as_float(vector_bits(v, e));
  }
};

__device__ __forceinline__ uint32_t warp_inclusive_scan(uint32_t value) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const uint32_t other = __shfl_up_sync(0xffffffffu, value, offset);
    if (lane >= offset) value += other;
  }
  return value;
}

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

// Select the `want` largest of `valid` keys: radix select unless all are wanted.
template <typename Get>
__device__ void select_largest(Get get, int64_t slots, uint32_t valid, uint32_t want,
                               uint32_t* hist, SelectState* state) {
  if (want > 0 && want < valid) {
    radix_select<0, true>(get, slots, want, hist, state);
  } else {
    if (threadIdx.x == 0) {
      state->prefix = 0;
      state->mask = 0;
      state->remaining = 0;
      state->done = 1;
    }
    __syncthreads();
  }
}

// Copies the keys with (key & mask) >= prefix to selection[0, count) in slot order of a
// deterministic layout: warp w owns slots [w * slots / kWarps, (w + 1) * slots / kWarps), read
// 32 consecutive slots at a time (no bank conflicts), placed by ballots and a scan of the warps'
// counts. slots must be a multiple of 32 * kWarps. Returns count.
template <typename Get>
__device__ uint32_t compact_selected(Get get, int slots, const SelectState* state,
                                     uint64_t* selection, uint32_t* scan_scratch) {
  const uint64_t prefix = state->prefix;
  const uint64_t mask = state->mask;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int per_warp = slots / kWarps;
  const int first = warp * per_warp + lane;
  const uint32_t lower_lanes = (1u << lane) - 1;
  uint32_t warp_total = 0;
  for (int j = 0; j < per_warp; j += 32) {
    uint64_t key;
    const bool take = get(first + j, key) && (key & mask) >= prefix;
    warp_total += __popc(__ballot_sync(0xffffffffu, take));
  }
  uint32_t total;
  const uint32_t warp_offset =
      block_exclusive_scan(lane == 0 ? warp_total : 0u, scan_scratch, total);
  uint32_t position = __shfl_sync(0xffffffffu, warp_offset, 0);
  for (int j = 0; j < per_warp; j += 32) {
    uint64_t key;
    const bool take = get(first + j, key) && (key & mask) >= prefix;
    const uint32_t ballot = __ballot_sync(0xffffffffu, take);
    if (take) selection[position + __popc(ballot & lower_lanes)] = key;
    position += __popc(ballot);
  }
  __syncthreads();
  return total;
}

// Sorts selection[0, width) descending (width a power of two) with a bitonic network.
__device__ inline void bitonic_sort_descending(uint64_t* selection, int width) {
  for (int size = 2; size <= width; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < width / 2; i += kThreads) {
        const int low = 2 * i - (i & (stride - 1));
        const int high = low + stride;
        const bool descending = (low & size) == 0;
        const uint64_t a = selection[low];
        const uint64_t b = selection[high];
        if ((a < b) == descending) {
          selection[low] = b;
          selection[high] = a;
        }
      }
      __syncthreads();
    }
  }
}

// Writes a row's answer: the indices of selection[0, count) (sorted best first when asked),
// then -1 up to k. Columns >= k are not touched.
__device__ inline void write_row(const Params& p, int64_t row, uint64_t* selection,
                                 uint32_t count) {
  if (p.sorted && count > 1) {
    int width = 1;
    while (width < static_cast<int>(count)) width <<= 1;
    for (int i = count + threadIdx.x; i < width; i += kThreads) selection[i] = 0;  // ranks last
    __syncthreads();
    bitonic_sort_descending(selection, width);
  }
  int32_t* out = p.out + row * p.out_stride0;
  for (int i = threadIdx.x; i < p.k; i += kThreads) {
    out[i * p.out_stride1] = i < static_cast<int>(count) ? rank_key_index(selection[i]) : -1;
  }
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

}  // namespace flashindexer::cuda::topk
