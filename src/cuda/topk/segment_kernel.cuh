// SPDX-License-Identifier: Apache-2.0
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
//          about 1.6-3.5 k keys of the segment are >= T (~2 k at k = 2048).
//       2. Stream the segment once with 16-byte evict-first loads (the next step's loads are
//          issued before the current step is processed), each warp over its own contiguous
//          range; the hot test is a float compare against the value of T; each warp appends its
//          keys >= T to its own 512-entry slice of the shared buffer at positions from a warp
//          scan (deterministic, no atomics), so the slices hold the survivors in index order,
//          and counts them in a 2048-bin histogram over [T, sample max] (the first select round).
//       3. If >= k' keys survived and no slice overflowed, the survivors contain the top-k':
//          the boundary bin of that histogram is resolved in shared memory (brute force when
//          <= 128 keys, else more 11-bit rounds inside it), then compaction. Otherwise (a > 4 sigma
//          sample, or more than 8192 keys >= T because of massive ties) the exact fallback runs:
//          radix select on the 32-bit score keys over global memory (<= 4 reads), then one read in
//          index order that takes every key above the k'-th score and the lowest-index keys equal
//          to it, placed by block scans. Never a truncation.
//   * Final rows are sorted best first when asked (a bitonic sort in registers, sort_rows.cuh),
//     else written in ascending index order (the compaction of the direct path and of the
//     survivors keeps it; the fallback's selection goes through a bitmap of the row,
//     write_marked_in_index_order), so that the unsorted answer is the same however the row
//     was split, i.e. in any batch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/radix_select.cuh"
#include "cuda/topk/segment_steps.cuh"
#include "cuda/topk/write_rows.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {

template <typename T, EmptyRows kEmptyRows>
__global__ void __launch_bounds__(kThreads, kMinCtasPerSm)
    topk_segment_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint64_t shared_keys[];
  uint64_t* buffer = shared_keys;                       // [kBufferCapacity] rank keys
  uint64_t* selection = shared_keys + kBufferCapacity;  // [selection_capacity(k)] rank keys
  __shared__ HistShared hs;  // histogram select; its bins also serve the fallback radix select
  __shared__ uint32_t warp_counts[kWarps];
  __shared__ uint32_t warp_taken[kWarps];  // per warp: its survivors in the unsorted answer
  __shared__ SelectState state;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)

  const int64_t row = blockIdx.x;
  const int split = blockIdx.y;
  int64_t row_start;
  int64_t row_count;
  row_range(p, row, row_start, row_count);
  if (kEmptyRows == EmptyRows::kLeave && row_count == 0) return;  // and the merge leaves it too

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
  const uint32_t want = selected_count(n, p.k);

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
  // above it, unselected (about 1.6-3.5 k for the whole row instead of k per split). Too few of
  // them in the row, or too many in a split, and the merge selects over the row exactly.
  const bool gated = !final_answer && row_count > kMinSegment;
  if (gated && n == 0) {
    if (threadIdx.x == 0) p.split_counts[row * p.splits + split] = 0;
    return;
  }
  bool gate_failed = false;

  const bool direct = n <= kBufferCapacity && !gated;  // its compaction keeps index order
  if (direct) {
    count = select_direct(scores, n, want, index_base, buffer, selection, hs);
  } else {
    // 1. Sampled threshold (over the whole row when gated, else over the segment).
    const T* sampled_scores = gated ? row_scores : scores;
    const int64_t sampled_n = gated ? row_count : n;
    const uint32_t sampled_want = gated ? selected_count(row_count, p.k) : want;
    uint32_t threshold;
    uint32_t sample_max;
    sampled_threshold(sampled_scores, sampled_n, sampled_want, false,
                      reinterpret_cast<uint32_t*>(buffer), hs, threshold, sample_max, [] {});
    SegmentStream<T, Scores<T>::kVectorsPerStep> stream;
    stream.begin(scores, n);
    stream_survivors(stream, index_base, threshold, sample_max, buffer, hs, warp_counts);

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
      const bool unsorted_answer = final_answer && !p.sorted;
      uint64_t cutoff = 0;                  // all survivors wanted
      const uint32_t* taken = warp_counts;  // per warp: its survivors >= cutoff
      if (want < survivors) {
        const uint64_t lo = static_cast<uint64_t>(threshold) << 32;
        const int first_shift = survivor_histogram_shift(threshold, sample_max);
        cutoff = select_cutoff(candidates, want, lo, ~uint64_t{0}, first_shift, true, hs,
                               unsorted_answer ? warp_taken : nullptr);
        taken = warp_taken;
      }
      if (unsorted_answer) {
        // The slices hold the survivors in index order: placed straight into the answer.
        int32_t* out = p.out + row * p.out_stride0;
        write_padding(p, out,
                      place_taken_indices(candidates, cutoff, taken, out, p.out_stride1, 0));
        return;
      }
      count = compact_cutoff(candidates, cutoff, selection, hs.scan);
    } else {
      select_from_global(scores, n, want, index_base, selection, hs, &state);
      count = want;
    }
  }

  if (final_answer && direct) {
    write_row(p, row, selection, count);
  } else if (final_answer) {
    // The fallback's selection (keys above the k-th score, then its ties) is not in index
    // order: the buffer, free now, becomes the bitmap that puts it there.
    write_row_from_any_order(p, row, selection, count, n, reinterpret_cast<uint32_t*>(buffer),
                             kBufferCapacity * 2, hs.scan);
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

// Launches topk_segment_kernel<T, kEmptyRows> over grid (rows, splits), as a programmatic
// dependent.
template <typename T, EmptyRows kEmptyRows>
cudaError_t launch_segment(const Params& params, int64_t rows, cudaStream_t stream) {
  const size_t shared =
      (kBufferCapacity + static_cast<size_t>(selection_capacity(params.k))) * sizeof(uint64_t);
  // The largest k's footprint, set on every launch (per device, host-side only, capture-safe).
  const int most = (kBufferCapacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  const cudaError_t configured = cudaFuncSetAttribute(
      topk_segment_kernel<T, kEmptyRows>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(topk_segment_kernel<T, kEmptyRows>,
                          dim3(static_cast<unsigned>(rows), static_cast<unsigned>(params.splits)),
                          dim3(kThreads), shared, stream, 0, params);
}

}  // namespace flashindexer::cuda::topk
