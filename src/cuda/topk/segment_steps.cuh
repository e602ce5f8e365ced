// SPDX-License-Identifier: Apache-2.0
// The steps of one CTA's selection over a segment of a row, shared by the segment kernel and
// the cluster kernel (segment_kernel.cuh, cluster_kernel.cu). Every function is called by all
// threads of the CTA and contains barriers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"

namespace flashindexer::cuda::topk {

// Direct path: the n <= kBufferCapacity keys at scores[0, n) go to shared memory (one read) and
// the `want` best go to selection[0, count) as rank keys (indices index_base + i); returns count.
template <typename T>
__device__ __forceinline__ uint32_t select_direct(const T* scores, int64_t n, uint32_t want,
                                                  uint32_t index_base, uint64_t* buffer,
                                                  uint64_t* selection, HistShared& hs) {
  using S = Scores<T>;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // All loads first (one latency, not 16), then the shared stores.
  constexpr int kPerThread = kBufferCapacity / kThreads;
  uint32_t keys[kPerThread];
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + threadIdx.x;
    keys[j] = i < n ? S::key(scores, i) : 0u;
  }
  uint32_t lowest = 0xffffffffu;
  uint32_t highest = 0;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int i = j * kThreads + threadIdx.x;
    if (i < n) {
      buffer[i] = rank_key(keys[j], index_base + i);
      lowest = lowest < keys[j] ? lowest : keys[j];
      highest = highest > keys[j] ? highest : keys[j];
    }
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  highest = __reduce_max_sync(0xffffffffu, highest);
  if (lane == 0) {
    hs.warp_min[warp] = lowest;
    hs.warp_max[warp] = highest;
  }
  __syncthreads();
  const uint32_t valid = static_cast<uint32_t>(n);
  const Candidates candidates{buffer, dense_slice(valid), nullptr, valid};
  return select_dense(candidates, want, reduce_warp_min(hs), reduce_warp_max(hs), selection, hs);
}

// Keys at scores before its first `bytes`-aligned address (bytes a power of two).
template <typename T>
__device__ __forceinline__ int64_t keys_before_alignment(const T* scores, uintptr_t bytes) {
  const uintptr_t offset = reinterpret_cast<uintptr_t>(scores) & (bytes - 1);
  return static_cast<int64_t>(((bytes - offset) & (bytes - 1)) / sizeof(T));
}

// Step 1: a threshold expected to let ~1.6-3.5 `want` of the n keys at scores[0, n) through (up
// to twice that with coarse_ok, see sample_threshold), from a sample of them (written to
// `sample`, 64 KiB); also the sample's largest key. after_loads() runs once the sample has
// arrived, before its selection (which leaves the memory system idle).
template <typename T, typename AfterLoads>
__device__ __forceinline__ void sampled_threshold(const T* scores, int64_t n, uint32_t want,
                                                  bool coarse_ok, uint32_t* sample, HistShared& hs,
                                                  uint32_t& threshold, uint32_t& sample_max,
                                                  AfterLoads after_loads) {
  using S = Scores<T>;
  int64_t groups = n / kSampleStride;
  groups = groups < kMinSampleGroups ? kMinSampleGroups
                                     : (groups > kMaxSampleGroups ? kMaxSampleGroups : groups);
  const int sampled = static_cast<int>(groups) * kSampleGroupKeys;
  // Groups are loaded kGroupsInFlight per thread at a time (all their loads in flight), then
  // stored: one latency up to 1024 groups (rows of <= 128K keys), four for the largest sample
  // (4 groups in flight spill at the 64-register cap).
  constexpr int kGroupsPerThread = kMaxSampleGroups / kThreads;
  constexpr int kGroupsInFlight = 2;
  // Each group is one aligned load (16 B of fp32, 8 of bf16): its start rounds down to the
  // group-aligned keys of the row. Four scalar loads per group had each warp's sample loads queue
  // four requests per sector.
  using Group = typename S::Group;
  static_assert(kSampleGroupKeys * sizeof(T) == sizeof(Group), "a group is one load");
  const int64_t lead = keys_before_alignment(scores, sizeof(Group));
  const int64_t last_group = (n - lead) / kSampleGroupKeys - 1;  // n > kBufferCapacity: >= 0
  const Group* groups_base = reinterpret_cast<const Group*>(scores + lead);
#pragma unroll
  for (int batch = 0; batch < kGroupsPerThread; batch += kGroupsInFlight) {
    if (batch * kThreads >= groups) break;
    uint32_t sampled_keys[kGroupsInFlight][kSampleGroupKeys];
    // Unconditional loads (a group index past the last reads the row's last aligned group and
    // is dropped below): with each load under its condition, the compiler issued them one after
    // another, each waiting for the one before (decode 64 x 131072: 30.4 -> 29.8 us).
#pragma unroll
    for (int gi = 0; gi < kGroupsInFlight; ++gi) {
      const int64_t g = (batch + gi) * kThreads + threadIdx.x;
      int64_t aligned = (g * n / groups - lead) / kSampleGroupKeys;
      aligned = aligned < 0 ? 0 : (aligned > last_group ? last_group : aligned);
      S::group_keys(__ldg(groups_base + aligned), sampled_keys[gi]);
    }
#pragma unroll
    for (int gi = 0; gi < kGroupsInFlight; ++gi) {
      const int64_t g = (batch + gi) * kThreads + threadIdx.x;
#pragma unroll
      for (int j = 0; j < kSampleGroupKeys; ++j) {
        if (g < groups) sample[g * kSampleGroupKeys + j] = sampled_keys[gi][j];
      }
    }
  }
  __syncthreads();
  after_loads();
  const float expected_rank = static_cast<float>(sampled) * want / static_cast<float>(n);
  float rank = ceilf(expected_rank + kSampleSigmas * sqrtf(expected_rank) + kRankSlack);
  rank = rank > sampled ? sampled : rank;
  sample_threshold(sample, sampled, static_cast<uint32_t>(rank), coarse_ok, hs, threshold,
                   sample_max);
}

// Vector u of a step's vectors, merged under masks: a runtime index into the register array,
// or a conditional choice between its elements (which the compiler turns into a choice between
// addresses), would put the array in local memory.
template <int kVectors>
__device__ __forceinline__ uint4 step_vector(const uint4 (&v)[kVectors], uint32_t u) {
  uint4 chosen = v[0];
#pragma unroll
  for (int i = 1; i < kVectors; ++i) {
    const uint32_t take = 0u - static_cast<uint32_t>(u == static_cast<uint32_t>(i));
    chosen.x ^= (chosen.x ^ v[i].x) & take;
    chosen.y ^= (chosen.y ^ v[i].y) & take;
    chosen.z ^= (chosen.z ^ v[i].z) & take;
    chosen.w ^= (chosen.w ^ v[i].w) & take;
  }
  return chosen;
}

// The shift of the survivors' first histogram round (2048 bins of rank keys over
// [threshold, sample_max], see stream_survivors), as select_cutoff takes it.
__device__ __forceinline__ int survivor_histogram_shift(uint32_t threshold, uint32_t sample_max) {
  return shift_for_range(static_cast<uint64_t>(sample_max - threshold)) + 32;
}

// The streaming read of one segment: its geometry and the loads of its first step, which a
// caller may issue before it knows the threshold (the cluster kernel does, so their latency
// overlaps the sample's selection). kVectorsPerStep (2 or 4) 16-byte loads per thread and step;
// two steps are in flight while streaming.
// The survivors reach the warps' slices in ascending index order, slice after slice, so a
// selection compacted from them is already in the unsorted answer's order (no sort, no bitmap).
// Warp w streams the w-th of kWarps contiguous ranges of the vectors (each a whole number of warp
// steps of 32 x kVectorsPerStep vectors); in a step, lane l reads pair g of the step's 32-byte
// pairs of vectors at g x 64 + 2 l: a sector per lane and pair of loads. All of a lane's vectors
// side by side (64 bytes for fp32) would need no reordering, but its loads each touched twice the
// sectors and streamed slower (H200, 4096 x 131072 fp32: 0.620 against 0.606 ms; 8 vectors per
// lane in the cluster kernel: 64 x 131072 29.3 against 26.1 us); stream_survivors places pair
// g's survivors after every lane's of the pairs before g instead.
template <typename T, int kVectorsPerStep>
struct SegmentStream {
  using S = Scores<T>;
  static_assert(kVectorsPerStep == 2 || kVectorsPerStep == 4, "one or two pairs per lane");
  static constexpr int kStep = 32 * kVectorsPerStep;  // a warp's vectors per step
  // Vector u of a lane's step, from the lane's first.
  __host__ __device__ static constexpr int vector_offset(int u) { return (u / 2) * 64 + u % 2; }
  // A lane's first vector of a step, from the step's first.
  __device__ __forceinline__ static int lane_offset() {
    return static_cast<int>(threadIdx.x & 31) * 2;
  }
  const T* scores;
  int64_t n;
  int head;  // keys before the first 16-byte boundary (at most 7), read one by one
  int64_t tail_begin;
  const uint4* vector_base;
  int first;  // this warp's vectors: [first, end)
  int end;
  uint4 next[kVectorsPerStep];

  // Loads the step from vector `base`. Out-of-range lanes read as NaN, which never passes the
  // comparison. A step wholly in range (all but the last) loads without per-vector tests and NaN
  // fills: they were a sixth of the streaming loop's instructions.
  __device__ __forceinline__ void load_step(int base, uint4 (&loaded)[kVectorsPerStep]) const {
    const int mine = base + lane_offset();
    if (base + kStep <= end) {
#pragma unroll
      for (int u = 0; u < kVectorsPerStep; ++u) {
        loaded[u] = __ldcs(vector_base + mine + vector_offset(u));
      }
      return;
    }
#pragma unroll
    for (int u = 0; u < kVectorsPerStep; ++u) {
      const int v = mine + vector_offset(u);
      loaded[u] = v < end ? __ldcs(vector_base + v)
                          : make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
    }
  }

  // Geometry of scores[0, n), and the first step's loads issued.
  __device__ __forceinline__ void begin(const T* segment_scores, int64_t count) {
    scores = segment_scores;
    n = count;
    const int64_t misaligned = keys_before_alignment(scores, sizeof(uint4));
    head = static_cast<int>(misaligned < n ? misaligned : n);
    const int64_t vectors = (n - head) / S::kPerVector;
    tail_begin = head + vectors * S::kPerVector;
    vector_base = reinterpret_cast<const uint4*>(scores + head);
    const int vector_count = static_cast<int>(vectors);
    const int range = (vector_count + kWarps * kStep - 1) / (kWarps * kStep) * kStep;
    const int warp = static_cast<int>(threadIdx.x >> 5);
    first = warp * range < vector_count ? warp * range : vector_count;
    end = first + range < vector_count ? first + range : vector_count;
    load_step(first, next);
  }

  // Asks L2 for up to `steps` of this warp's steps after the first (one bulk request by lane 0).
  __device__ __forceinline__ void prefetch_to_l2(int steps) const {
    const int from = first + kStep;
    const int until = from + steps * kStep < end ? from + steps * kStep : end;
    if ((threadIdx.x & 31) == 0 && from < until) {
      ptx::prefetch_l2_bulk(vector_base + from,
                            static_cast<uint32_t>((until - from) * sizeof(uint4)));
    }
  }
};

// Step 2: one streaming read of the segment begun in `stream`: every key >= threshold goes, as a
// rank key with index index_base + i, to this warp's slice of `buffer` (kWarpSlice slots; counts
// beyond mark an overflow), counted in warp_counts[warp] and in the first histogram round of the
// survivors (hs.bins over [threshold, sample_max], bins of survivor_histogram_shift).
template <typename T, int kVectorsPerStep>
__device__ __forceinline__ void stream_survivors(SegmentStream<T, kVectorsPerStep>& stream,
                                                 uint32_t index_base, uint32_t threshold,
                                                 uint32_t sample_max, uint64_t* buffer,
                                                 HistShared& hs, uint32_t* warp_counts) {
  using S = Scores<T>;
  constexpr int kPerVector = S::kPerVector;
  const T* scores = stream.scores;
  const int64_t n = stream.n;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  // The survivors' first histogram round is built while streaming, on score keys only (32-bit
  // arithmetic in the loop): 2048 bins over [T, sample max]; keys above the sample's largest
  // fall into the top bin, whose range is then [its start, all ones].
  const int score_shift = survivor_histogram_shift(threshold, sample_max) - 32;
  auto survivor_bin = [&](uint32_t key) {
    const uint32_t bin = (key - threshold) >> score_shift;
    return bin > kHistBins - 1 ? static_cast<uint32_t>(kHistBins - 1) : bin;
  };
  for (int b = threadIdx.x; b < kHistBins; b += kThreads) hs.bins[b] = 0;
  __syncthreads();  // the sample is read and the bins are clear before the slices are written

  // 2. One streaming read: keys >= threshold go to this warp's slice of the buffer.
  uint64_t* slice = buffer + warp * kWarpSlice;
  const uint32_t slice_address = ptx::smem_address(slice);
  uint32_t warp_count = 0;  // warp-uniform
  // Keys outside the vectors, at most 7 of them (lane l takes keys_at[l], index first_index + l,
  // for l < keys), appended to this warp's slice: the unaligned head by warp 0 before its range,
  // the tail by the last warp after its range, so that the slices stay in index order.
  auto take_loose_keys = [&](const T* keys_at, uint32_t first_index, int keys) {
    const bool in_range = lane < keys;
    const uint32_t key = in_range ? S::key(keys_at, lane) : 0u;
    const bool keep = in_range && key >= threshold;
    const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
    const uint32_t position = warp_count + __popc(ballot & ((1u << lane) - 1));
    if (keep) {
      const uint64_t ranked = rank_key(key, first_index + static_cast<uint32_t>(lane));
      if (position < kWarpSlice) slice[position] = ranked;
      atomicAdd(&hs.bins[survivor_bin(key)], 1u);
    }
    warp_count += __popc(ballot);
  };
  if (warp == 0) take_loose_keys(scores, index_base, stream.head);
  const int tail_keys = static_cast<int>(n - stream.tail_begin);
  // The hot loop compares floats (key_threshold); a threshold of 0 sends the segment to the
  // fallback.
  const float threshold_value = key_threshold(threshold);
  using Stream = SegmentStream<T, kVectorsPerStep>;
  constexpr int kStep = Stream::kStep;
  const int end = stream.end;
  static_assert(kVectorsPerStep * kPerVector <= 32, "a step's keys are bits of one word");
  // Two pairs of vectors per lane: the pairs' counts in 16-bit fields of one word, scanned
  // together.
  constexpr bool kTwoPairs = kVectorsPerStep == 4;
  constexpr int kPairKeys = 2 * kPerVector;
  // One step: one compare per key, into a bit per key (vector u's keys at bits u * kPerVector +
  // e); the count is a popc, and one loop over the set bits places the survivors. A running
  // count, then the compares again for the survivors' vectors, made the step a chain of ~100
  // dependent instructions; a survivors' loop per vector ran each of them at almost every step
  // (at k = 2048 of 128K a warp's step has ~13 survivors, so some lane nearly always has one in
  // each vector): one loop over all bits runs ~2 times instead of ~4.
  const uint32_t vectors_index = index_base + static_cast<uint32_t>(stream.head);
  auto consume = [&](const uint4(&values)[kVectorsPerStep], int base) {
    uint32_t passing_bits = 0;
#pragma unroll
    for (int u = 0; u < kVectorsPerStep; ++u) {
#pragma unroll
      for (int e = 0; e < kPerVector; ++e) {
        passing_bits |= (S::vector_value(values[u], e) >= threshold_value ? 1u : 0u)
                        << (u * kPerVector + e);
      }
    }
    uint32_t step_total;
    // Survivor j (in bit order) of this lane goes to slot position + j, plus, with two pairs,
    // the 16-bit field of its pair in pair_skip: the survivors of the other lanes' pairs that
    // come before it, less this lane's own of pair 0.
    uint32_t position;
    uint32_t pair_skip = 0;
    if constexpr (kTwoPairs) {
      const uint32_t first_pair = __popc(passing_bits & ((1u << kPairKeys) - 1));
      const uint32_t counts = first_pair | (__popc(passing_bits >> kPairKeys) << 16);
      const uint32_t inclusive = warp_inclusive_scan(counts);
      const uint32_t totals = __shfl_sync(0xffffffffu, inclusive, 31);
      const uint32_t first_pair_total = totals & 0xffffu;
      step_total = first_pair_total + (totals >> 16);
      pair_skip = inclusive - counts + ((first_pair_total - first_pair) << 16);
      position = warp_count;
    } else {
      const uint32_t mine = __popc(passing_bits);
      const uint32_t inclusive = warp_inclusive_scan(mine);
      step_total = __shfl_sync(0xffffffffu, inclusive, 31);
      position = warp_count + inclusive - mine;
    }
    if (step_total == 0) return;
    const uint32_t first_index =
        vectors_index + static_cast<uint32_t>(base + Stream::lane_offset()) * kPerVector;
    while (passing_bits != 0) {
      const uint32_t b = __ffs(passing_bits) - 1;
      passing_bits &= passing_bits - 1;
      const uint32_t u = b / kPerVector;
      const uint32_t key = number_key(S::vector_bits(step_vector(values, u), b % kPerVector));
      uint32_t slot = position;
      if constexpr (kTwoPairs) slot += (pair_skip >> (b / kPairKeys * 16)) & 0xffffu;
      // A predicated store: a branch around it (its reconvergence and the address arithmetic
      // in it) cost ~2 % of prefill against a branch-free store; keys past the slice's end are
      // counted, not stored.
      ptx::store_shared_if(
          slot < kWarpSlice, slice_address + slot * 8,
          rank_key(key, first_index + Stream::vector_offset(u) * kPerVector + b % kPerVector));
      atomicAdd(&hs.bins[survivor_bin(key)], 1u);
      ++position;
    }
    warp_count += step_total;
  };
  // Two steps in flight: the next one's loads are issued before this one is consumed. Unrolled
  // by two so that the two register buffers alternate instead of being copied.
  uint4(&even)[kVectorsPerStep] = stream.next;
  uint4 odd[kVectorsPerStep];
  const int first_base = threshold == 0 ? end : stream.first;
  for (int base = first_base; base < end; base += 2 * kStep) {
    stream.load_step(base + kStep, odd);
    consume(even, base);
    if (base + kStep >= end) break;
    stream.load_step(base + 2 * kStep, even);
    consume(odd, base + kStep);
  }
  if (warp == kWarps - 1) {
    take_loose_keys(scores + stream.tail_begin,
                    index_base + static_cast<uint32_t>(stream.tail_begin), tail_keys);
  }
  if (lane == 0) warp_counts[warp] = warp_count;
  __syncthreads();
}

}  // namespace flashindexer::cuda::topk
