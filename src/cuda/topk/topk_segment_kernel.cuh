// topk_segment_kernel: the exact top-k of one segment of one row, per CTA.
//
// Serves every shape: grid (rows, splits). With splits == 1 a CTA owns a whole row and writes
// the answer; with splits > 1 (few rows: decode) a row is cut into `splits` contiguous segments
// on the device (from the row's real length). A row of more than kMinSegment keys is gated:
// every split computes the same threshold from the same sample of the whole row and writes all
// its segment's keys above it (unselected) into the workspace, or kSplitGateFailed when they do
// not fit; a shorter row has one split, which writes its exact top-k. topk_merge_kernel then
// selects among them, or over the row itself when the gate let fewer than k keys through.
//
// Per segment of n keys (k' = min(k, n) wanted):
//   * n <= k and unsorted, whole row: write 0..n-1 and -1 padding, without reading the scores.
//   * n <= 8192 (kBufferCapacity), not gated: direct path. All n rank keys go to shared memory,
//     histogram select over their [min, max] range + compaction there.
//   * longer, or gated: sampled threshold (gated: sampled over the whole row), one streaming
//     read; a gated split stops after step 2 and hands over its survivors.
//       1. Sample: groups of 4 consecutive keys at evenly spaced positions (2K-16K keys).
//          Threshold T <= the sample's rank-r key, r = q + 4 sqrt(q) + 8 with q = sample * k / n,
//          from two 11-bit histogram rounds (T is that key with its low 10 bits cleared), so
//          about 1.6-2.7 k keys of the segment are >= T.
//       2. Stream the segment once with 16-byte evict-first loads (the next step's loads are
//          issued before the current step is processed); the hot test is a float compare
//          against the value of T; each warp appends its keys >= T to its own 512-entry slice
//          of the shared buffer at positions from a warp scan (deterministic, no atomics), and
//          counts it in a 2048-bin histogram over [T, sample max] (the first select round).
//       3. If >= k' keys survived and no slice overflowed, the survivors contain the top-k':
//          the boundary bin of that histogram is resolved in shared memory (brute force when
//          <= 128 keys, else more 11-bit rounds inside it), then compaction. Otherwise (a > 4 sigma
//          sample, or more than 8192 keys >= T because of massive ties) the exact fallback runs:
//          radix select on the 32-bit score keys over global memory (<= 4 reads), then one read in
//          index order that takes every key above the k'-th score and the lowest-index keys equal
//          to it, placed by block scans. Never a truncation.
//   * Final rows are sorted best first in shared memory when asked (bitonic, <= 4096 keys).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/config.h"
#include "cuda/topk/select_core.cuh"

namespace flashindexer::cuda::topk {

template <typename T>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm)
    topk_segment_kernel(const __grid_constant__ Params p) {
  using S = Scores<T>;
  constexpr int kPerVector = S::kPerVector;
  constexpr int kVectorsPerStep = S::kVectorsPerStep;
  extern __shared__ uint64_t shared_keys[];
  uint64_t* buffer = shared_keys;                       // [kBufferCapacity] rank keys
  uint64_t* selection = shared_keys + kBufferCapacity;  // [selection_capacity(k)] rank keys
  __shared__ HistShared hs;  // histogram select; its bins also serve the fallback radix select
  __shared__ uint32_t warp_counts[kWarps];
  __shared__ SelectState state;

  const int64_t row = blockIdx.x;
  const int split = blockIdx.y;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int64_t row_start;
  int64_t row_count;
  row_range(p, row, row_start, row_count);

  // This CTA's segment: splits are decided on the device from the row's real length.
  int64_t segment_begin = 0;
  int64_t n = row_count;
  const bool final_answer = p.splits == 1;
  if (!final_answer) {
    int64_t used = (row_count + kMinSegment - 1) / kMinSegment;
    used = used < 1 ? 1 : (used > p.splits ? p.splits : used);
    int64_t segment = (row_count + used - 1) / used;
    segment = (segment + 7) / 8 * 8;  // keeps segments' 16-byte alignment relative to the row
    segment_begin = split * segment;
    n = row_count - segment_begin;
    n = n < 0 ? 0 : (n > segment ? segment : n);
  }
  const uint32_t want = static_cast<uint32_t>(n < p.k ? n : p.k);

  if (final_answer && !p.sorted && n <= p.k) {
    int32_t* out = p.out + row * p.out_stride0;
    for (int i = threadIdx.x; i < p.k; i += kThreads) out[i * p.out_stride1] = i < n ? i : -1;
    return;
  }
  const T* row_scores = static_cast<const T*>(p.logits) + row * p.logits_stride + row_start;
  const T* scores = row_scores + segment_begin;
  const uint32_t index_base = static_cast<uint32_t>(segment_begin);
  uint32_t count = 0;  // keys in selection[]
  // A row split across CTAs is gated by one threshold for the whole row: every split draws the
  // same sample of the row (so computes the same threshold) and hands the merge all its keys
  // above it, unselected (about 1.6-2.7 k for the whole row instead of k per split). Too few of
  // them in the row, or too many in a split, and the merge selects over the row exactly.
  const bool gated = !final_answer && row_count > kMinSegment;
  if (gated && n == 0) {
    if (threadIdx.x == 0) p.split_counts[row * p.splits + split] = 0;
    return;
  }
  bool gate_failed = false;

  if (n <= kBufferCapacity && !gated) {
    // Direct path: the whole segment in shared memory.
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
    count = select_dense(candidates, want, reduce_warp_min(hs), reduce_warp_max(hs), selection, hs);
  } else {
    // 1. Sampled threshold (over the whole row when gated, else over the segment).
    const T* sampled_scores = gated ? row_scores : scores;
    const int64_t sampled_n = gated ? row_count : n;
    const uint32_t sampled_want =
        gated ? static_cast<uint32_t>(row_count < p.k ? row_count : p.k) : want;
    uint32_t* sample = reinterpret_cast<uint32_t*>(buffer);
    int64_t groups = sampled_n / kSampleStride;
    groups = groups < kMinSampleGroups ? kMinSampleGroups
                                       : (groups > kMaxSampleGroups ? kMaxSampleGroups : groups);
    const int sampled = static_cast<int>(groups) * kSampleGroupKeys;
    // Groups are loaded kGroupsInFlight per thread at a time (all their loads in flight), then
    // stored: one latency up to 1024 groups (rows of <= 128K keys), four for the largest sample
    // (4 groups in flight spill at the 64-register cap).
    constexpr int kGroupsPerThread = kMaxSampleGroups / kThreads;
    constexpr int kGroupsInFlight = 2;
#pragma unroll
    for (int batch = 0; batch < kGroupsPerThread; batch += kGroupsInFlight) {
      if (batch * kThreads >= groups) break;
      uint32_t sampled_keys[kGroupsInFlight][kSampleGroupKeys];
#pragma unroll
      for (int gi = 0; gi < kGroupsInFlight; ++gi) {
        const int64_t g = (batch + gi) * kThreads + threadIdx.x;
        const int64_t position = g * sampled_n / groups;
#pragma unroll
        for (int j = 0; j < kSampleGroupKeys; ++j) {
          const int64_t i = position + j < sampled_n ? position + j : sampled_n - 1;
          sampled_keys[gi][j] = g < groups ? S::key(sampled_scores, i) : 0u;
        }
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
    const float expected_rank =
        static_cast<float>(sampled) * sampled_want / static_cast<float>(sampled_n);
    float rank = ceilf(expected_rank + kSampleSigmas * sqrtf(expected_rank) + kRankSlack);
    rank = rank > sampled ? sampled : rank;
    uint32_t threshold;
    uint32_t sample_max;
    sample_threshold(sample, sampled, static_cast<uint32_t>(rank), hs, threshold, sample_max);
    // The survivors' first histogram round is built while streaming, on score keys only (32-bit
    // arithmetic in the loop): 2048 bins over [T, sample max]; keys above the sample's largest
    // fall into the top bin, whose range is then [its start, all ones].
    const uint64_t lo = static_cast<uint64_t>(threshold) << 32;
    const int first_shift = shift_for_range(static_cast<uint64_t>(sample_max - threshold)) + 32;
    const int score_shift = first_shift - 32;
    auto survivor_bin = [&](uint32_t key) {
      const uint32_t bin = (key - threshold) >> score_shift;
      return bin > kHistBins - 1 ? static_cast<uint32_t>(kHistBins - 1) : bin;
    };
    for (int b = threadIdx.x; b < kHistBins; b += kThreads) hs.bins[b] = 0;
    __syncthreads();  // the sample is read and the bins are clear before the slices are written

    // 2. One streaming read: keys >= threshold go to this warp's slice of the buffer.
    uint64_t* slice = buffer + warp * kWarpSlice;
    uint32_t warp_count = 0;  // warp-uniform
    // Keys before the first 16-byte boundary (at most 7) are read one by one.
    const int misaligned =
        static_cast<int>(((16 - (reinterpret_cast<uintptr_t>(scores) & 15)) & 15) / sizeof(T));
    const int head = misaligned < n ? misaligned : static_cast<int>(n);
    const int64_t vectors = (n - head) / kPerVector;
    const int64_t tail_begin = head + vectors * kPerVector;
    if (warp == 0) {
      // Unaligned head (lanes 0..7) and tail (lanes 16..23): at most 7 keys each.
      int64_t i = -1;
      if (lane < head) i = lane;
      if (lane >= 16 && tail_begin + (lane - 16) < n) i = tail_begin + (lane - 16);
      const uint32_t key = i >= 0 ? S::key(scores, i) : 0u;
      const bool keep = i >= 0 && key >= threshold;
      const uint32_t ballot = __ballot_sync(0xffffffffu, keep);
      const uint32_t position = __popc(ballot & ((1u << lane) - 1));
      if (keep) {
        const uint64_t ranked = rank_key(key, index_base + static_cast<uint32_t>(i));
        if (position < kWarpSlice) slice[position] = ranked;
        atomicAdd(&hs.bins[survivor_bin(key)], 1u);
      }
      warp_count = __popc(ballot);
    }
    // The hot loop compares floats: for every non-NaN x, score_key(x) >= threshold exactly
    // when x >= threshold_value (the float whose key is the threshold); NaN keys (0) are below
    // any threshold > 0, and a threshold of 0 sends the segment to the fallback.
    // A threshold in (0, 0x007fffff] (only -inf, 0x007fffff, and no score lies in it: NaNs are 0)
    // compares as -inf: every non-NaN score passes, the same set as key >= threshold.
    uint32_t threshold_bits = (threshold & 0x80000000u) ? (threshold & 0x7fffffffu) : ~threshold;
    if (threshold != 0 && threshold <= 0x007fffffu) threshold_bits = 0xff800000u;
    const float threshold_value = __uint_as_float(threshold_bits);
    const uint4* vector_base = reinterpret_cast<const uint4*>(scores + head);
    const int vector_count = static_cast<int>(vectors);
    constexpr int kStep = kThreads * kVectorsPerStep;
    // Out-of-range lanes read as NaN, which never passes the comparison. The next step's loads
    // are issued before this step is processed: two steps in flight per thread.
    auto load_step = [&](int base, uint4(&loaded)[kVectorsPerStep]) {
#pragma unroll
      for (int u = 0; u < kVectorsPerStep; ++u) {
        const int v = base + u * kThreads + threadIdx.x;
        loaded[u] = v < vector_count
                        ? __ldcs(vector_base + v)
                        : make_uint4(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
      }
    };
    uint4 next[kVectorsPerStep];
    const int first_base = threshold == 0 ? vector_count : 0;
    load_step(first_base, next);
    for (int base = first_base; base < vector_count; base += kStep) {
      uint4 loaded[kVectorsPerStep];
#pragma unroll
      for (int u = 0; u < kVectorsPerStep; ++u) loaded[u] = next[u];
      load_step(base + kStep, next);
      uint32_t mine = 0;
#pragma unroll
      for (int u = 0; u < kVectorsPerStep; ++u) {
#pragma unroll
        for (int e = 0; e < kPerVector; ++e) {
          mine += S::vector_value(loaded[u], e) >= threshold_value ? 1u : 0u;
        }
      }
      const uint32_t inclusive = warp_inclusive_scan(mine);
      const uint32_t step_total = __shfl_sync(0xffffffffu, inclusive, 31);
      if (step_total == 0) continue;
      uint32_t position = warp_count + inclusive - mine;
      if (mine > 0) {
        // Only the set bits of a per-vector mask are visited (a survivor is rare: ~0.4 per
        // thread and step at k = 2048 of 128K), instead of 16 predicated blocks per step.
#pragma unroll
        for (int u = 0; u < kVectorsPerStep; ++u) {
          uint32_t passing = 0;
#pragma unroll
          for (int e = 0; e < kPerVector; ++e) {
            passing |= (S::vector_value(loaded[u], e) >= threshold_value ? 1u : 0u) << e;
          }
          const uint32_t first_index =
              index_base +
              static_cast<uint32_t>(head + (base + u * kThreads + threadIdx.x) * kPerVector);
          while (passing != 0) {
            const int e = __ffs(passing) - 1;
            passing &= passing - 1;
            const uint32_t key = S::vector_key(loaded[u], e);
            if (position < kWarpSlice) slice[position] = rank_key(key, first_index + e);
            atomicAdd(&hs.bins[survivor_bin(key)], 1u);
            ++position;
          }
        }
      }
      warp_count += step_total;
    }
    if (lane == 0) warp_counts[warp] = warp_count;
    __syncthreads();
    uint32_t survivors = 0;
    bool overflow = false;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      survivors += warp_counts[w];
      overflow |= warp_counts[w] > kWarpSlice;
    }

    if (gated) {
      // Every key of the segment >= the threshold goes straight to its workspace slot, in
      // slot order.
      gate_failed =
          threshold == 0 || overflow || survivors > static_cast<uint32_t>(p.split_capacity);
      const Candidates candidates{buffer, kWarpSlice, warp_counts, survivors};
      uint64_t* slot_keys = p.split_keys + (row * p.splits + split) * p.split_capacity;
      if (!gate_failed) count = compact_cutoff(candidates, 0, slot_keys, hs.scan);
    } else if (threshold != 0 && !overflow && survivors >= want) {
      // 3. Exact selection among the survivors: the streamed histogram, then (rarely) more
      // rounds inside the boundary bin.
      const Candidates candidates{buffer, kWarpSlice, warp_counts, survivors};
      uint64_t cutoff = 0;  // all survivors wanted
      if (want < survivors) {
        cutoff = select_cutoff(candidates, want, lo, ~uint64_t{0}, first_shift, true, hs);
      }
      count = compact_cutoff(candidates, cutoff, selection, hs.scan);
    } else {
      select_from_global(scores, n, want, index_base, selection, hs, &state);
      count = want;
    }
  }

  if (final_answer) {
    write_row(p, row, selection, count);
  } else {
    const int64_t slot = row * p.splits + split;
    uint64_t* keys = p.split_keys + slot * p.split_capacity;
    if (!gated) {
      for (uint32_t i = threadIdx.x; i < count; i += kThreads) keys[i] = selection[i];
    }
    if (threadIdx.x == 0) {
      p.split_counts[slot] = gate_failed ? kSplitGateFailed : static_cast<int32_t>(count);
    }
  }
}

}  // namespace flashindexer::cuda::topk
