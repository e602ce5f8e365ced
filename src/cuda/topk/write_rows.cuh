// SPDX-License-Identifier: Apache-2.0
// Writing a row's answer from a CTA's selection: best first (sort_rows.cuh) when asked, else in
// ascending index order (through a bitmap of the row when the selection is in another order),
// then -1 up to k. Also the whole select-and-write of a row from candidates already dense in
// shared memory (write_best_candidates: the merge kernel, the fused indexer's select).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/params.h"
#include "cuda/topk/sort_rows.cuh"

namespace flashindexer::cuda::topk {

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

// Writes a row's answer from its `valid` candidates, dense at buffer[0, valid) in shared memory in
// any order (the merge's splits, the fused indexer's emitted keys): the row_want best of them,
// sorted best first through selection[] when asked, else marked straight from the buffer in a
// bitmap over the selection's selection_slots slots (merge_selection_slots) and written in
// ascending index order of the row's row_count keys; then -1 up to k. Contains barriers.
__device__ __forceinline__ void write_best_candidates(const Params& p, int64_t row,
                                                      const uint64_t* buffer, uint32_t valid,
                                                      uint64_t* selection, int selection_slots,
                                                      int64_t row_count, uint32_t row_want,
                                                      HistShared& hs) {
  uint32_t lowest = 0xffffffffu;
  uint32_t highest = 0;
  for (uint32_t i = threadIdx.x; i < valid; i += kThreads) {
    const uint32_t score = static_cast<uint32_t>(buffer[i] >> 32);
    lowest = lowest < score ? lowest : score;
    highest = highest > score ? highest : score;
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  highest = __reduce_max_sync(0xffffffffu, highest);
  if ((threadIdx.x & 31) == 0) {
    hs.warp_min[threadIdx.x >> 5] = lowest;
    hs.warp_max[threadIdx.x >> 5] = highest;
  }
  __syncthreads();
  const Candidates candidates{buffer, dense_slice(valid), nullptr, valid};
  const uint32_t lowest_key = reduce_warp_min(hs);
  const uint32_t highest_key = reduce_warp_max(hs);
  if (p.sorted) {
    write_row(p, row, selection,
              select_dense(candidates, row_want, lowest_key, highest_key, selection, hs));
    return;
  }
  // Unsorted: the candidates at or above the cutoff mark their indices straight from the buffer
  // into a bitmap over the selection's space, with no compaction (its counting and placing
  // passes were ~19 % of the fused select's instructions).
  const uint64_t cutoff = dense_cutoff(candidates, row_want, lowest_key, highest_key, hs);
  int32_t* out = p.out + row * p.out_stride0;
  const uint32_t count = write_marked_in_index_order(
      out, p.out_stride1, row_count, reinterpret_cast<uint32_t*>(selection), 2 * selection_slots,
      hs.scan, [&](uint32_t* bits, uint32_t first, uint32_t span) {
        for (uint32_t i = threadIdx.x; i < valid; i += kThreads) {
          const uint64_t key = buffer[i];
          if (key >= cutoff) mark_index(bits, first, span, rank_key_index(key));
        }
      });
  write_padding(p, out, count);
}

}  // namespace flashindexer::cuda::topk
