// SPDX-License-Identifier: Apache-2.0
// A source layer's block maxima in the fused scan (EmitParams::block_max, candidates.h): each
// visible score is folded into the maximum of its candidate block, without the logits. The scan
// sees a row's scores in aligned groups of 8 keys (8 lanes of a consumer warp at decode, 2 lanes
// of an emitter at prefill), so it reduces each group across its lanes and folds the group's
// maximum into its block:
//  * a row whose blocks are the groups (block size 8, ks a multiple of 8; every decode row at
//    block size 8) stores the group's maximum as a float, its block score: one lane writes each
//    block once;
//  * any other row (block size a larger multiple of 8, or an unaligned ks) folds the group's one
//    or two parts (a group meets at most two blocks) into its blocks' block_key by atomicMax.
// block_scores_kernel.cu reads both forms back, folds in the sampled tiles the scan skipped, and
// turns the entries into select_candidate_blocks' block scores. The maximum keeps NaN (max.NaN),
// and a NaN block scores +inf there as in candidates.h, so the key of a NaN part is that of +inf.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/rank_key.cuh"
#include "cuda/sm90_fused/emit_params.h"

namespace flashindexer::cuda::fused {

// max(a, b), NaN if either is NaN (fmaxf returns the other operand).
__device__ __forceinline__ float max_keeping_nan(float a, float b) {
  float m;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(m) : "f"(a), "f"(b));
  return m;
}

// A maximum as its block's score: NaN ranks with +inf (candidates.h).
__device__ __forceinline__ float nan_as_inf(float m) { return m != m ? INFINITY : m; }

// The atomic form's entry for a part whose maximum is m: larger for a larger block score, NaN
// as +inf; 0 (nothing folded) lies below every such key, even that of -inf. key_threshold reads
// it back (number_key's inverse on numbers, -inf for 0).
__device__ __forceinline__ uint32_t block_key(float m) {
  return number_key(__float_as_uint(nan_as_inf(m)));
}

// Whether row [lo, hi) of a scan with block size block_size has its blocks stored as floats.
__device__ __forceinline__ bool blocks_are_groups(int32_t lo, int32_t block_size) {
  return block_size == kGroupKeys && lo % kGroupKeys == 0;
}

// Folds the maxima of one group's two parts (the keys before and from its first block boundary)
// into a row's entries (`entries`: the row's first): the general form, for a row not laid out in
// groups (an unaligned lo, or blocks of 16 keys or more). group: the group's first key; ma / mb:
// the maxima of the parts' visible keys (-inf where none). Called by one lane per group and row,
// only in the scans' branch for items with such rows, so that its divisions stay off the common
// path.
__device__ __forceinline__ void fold_group_parts(const EmitParams& e, float* entries, int32_t lo,
                                                 int32_t hi, int32_t group, float ma, float mb) {
  const int32_t first = max(group, lo);
  const int32_t last = min(group + kGroupKeys, hi);
  if (first >= last) return;  // no visible key in the group
  auto* keys = reinterpret_cast<uint32_t*>(entries);
  const int32_t block = (first - lo) / e.block_size;
  atomicMax(keys + block, block_key(ma));
  if (lo + (block + 1) * e.block_size < last) atomicMax(keys + block + 1, block_key(mb));
}

// The same for a row laid out in groups (blocks_are_groups): its block is the group, and the
// entry is its block score already (NaN as +inf; block_scores_kernel pins the newest). visible:
// the group has a visible key (known on most steps, else tested here).
__device__ __forceinline__ void store_group(float* entries, int32_t lo, int32_t hi, int32_t group,
                                            float m, bool visible) {
  if (visible || (group < hi && group + kGroupKeys > lo)) {
    entries[static_cast<uint32_t>(group - lo) / kGroupKeys] = nan_as_inf(m);
  }
}

// Whether `key` lies in its group's second part: at or past the first block boundary after the
// group's first visible key.
__device__ __forceinline__ bool in_second_part(const EmitParams& e, int32_t lo, int32_t group,
                                               int32_t key) {
  const int32_t first = max(group, lo);
  return key >= lo + ((first - lo) / e.block_size + 1) * e.block_size;
}

// Whether every row of an item (lanes' [lo, hi), empty for none) is laid out in groups: the
// scans' fast form. Call from the whole warp.
__device__ __forceinline__ bool all_rows_in_groups(const EmitParams& e, int32_t lo, int32_t hi) {
  return __all_sync(0xffffffffu, lo >= hi || blocks_are_groups(lo, e.block_size));
}

// An emitter lane's groups (prefill, emit_scores): vector v of the lane holds 4 consecutive keys
// from first_key + 4 kLanesPerRow v, and lanes 2m, 2m + 1 of a row hold a group. Two halves:
// emitter_group_maxima reduces each group (its two parts' maxima in ma[v] / mb[v] on both lanes)
// while the scores are in registers; fold_emitter_groups writes them from the even lanes, after
// the emitter has released its score buffer. Written before the release, the stores held up the
// emitter at its fence (MEMBAR.ALL.CTA waits for them), and the H = 32 scan at 4096 x 131072
// took 1.35x as long on the H200; after it, the next step's fence finds them done.
// in_range: every key of the step's tile is visible to the lane's row; groups (warp-uniform):
// every row of the item is laid out in groups (all_rows_in_groups); otherwise each row keeps its
// own form (the one block_scores_kernel reads back). Call both from the whole warp.
template <int kLanesPerRow, int kMine>
__device__ __forceinline__ void emitter_group_maxima(const EmitParams& e, int32_t lo, int32_t hi,
                                                     int32_t first_key,
                                                     const float (&values)[kMine], bool in_range,
                                                     bool groups, float (&ma)[kMine / 4],
                                                     float (&mb)[kMine / 4]) {
  static_assert(kLanesPerRow % 2 == 0 && kMine % 4 == 0, "a group is two lanes' vectors");
  constexpr int kVectors = kMine / 4;
  if (groups) {
    // One branch per step, not per vector: most steps are in range.
    if (in_range) {
#pragma unroll
      for (int v = 0; v < kVectors; ++v) {
        ma[v] = max_keeping_nan(max_keeping_nan(values[4 * v], values[4 * v + 1]),
                                max_keeping_nan(values[4 * v + 2], values[4 * v + 3]));
      }
    } else {
#pragma unroll
      for (int v = 0; v < kVectors; ++v) {
        const int32_t first = first_key + 4 * kLanesPerRow * v;
        ma[v] = -INFINITY;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (first + j >= lo && first + j < hi) ma[v] = max_keeping_nan(ma[v], values[4 * v + j]);
        }
      }
    }
#pragma unroll
    for (int v = 0; v < kVectors; ++v) {
      ma[v] = max_keeping_nan(ma[v], __shfl_xor_sync(0xffffffffu, ma[v], 1));
    }
    return;
  }
#pragma unroll
  for (int v = 0; v < kVectors; ++v) {
    const int32_t first = first_key + 4 * kLanesPerRow * v;
    const int32_t group = first & ~(kGroupKeys - 1);
    ma[v] = -INFINITY;
    mb[v] = -INFINITY;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t key = first + j;
      if (key >= lo && key < hi) {
        if (in_second_part(e, lo, group, key)) {
          mb[v] = max_keeping_nan(mb[v], values[4 * v + j]);
        } else {
          ma[v] = max_keeping_nan(ma[v], values[4 * v + j]);
        }
      }
    }
    ma[v] = max_keeping_nan(ma[v], __shfl_xor_sync(0xffffffffu, ma[v], 1));
    mb[v] = max_keeping_nan(mb[v], __shfl_xor_sync(0xffffffffu, mb[v], 1));
  }
}

// entries: the lane's row's first entry. A row in groups stores its vectors' groups through one
// pointer, at constant offsets: the compiler recomputed the row's offset for each group (the
// emitter has few registers), which took over half of the fold's instructions.
template <int kLanesPerRow, int kVectors>
__device__ __forceinline__ void fold_emitter_groups(const EmitParams& e, float* entries, int32_t lo,
                                                    int32_t hi, int32_t first_key,
                                                    const float (&ma)[kVectors],
                                                    const float (&mb)[kVectors], bool in_range,
                                                    bool groups, int lane) {
  if ((lane & 1) != 0) return;
  constexpr int kGroupStride = 4 * kLanesPerRow;  // keys between a lane's vectors
  const int32_t first_group = first_key & ~(kGroupKeys - 1);
  if (groups || blocks_are_groups(lo, e.block_size)) {
    // lo is a multiple of 8, so the group's block is (group - lo) / 8, negative before lo.
    float* at = entries + (first_group - lo) / kGroupKeys;
#pragma unroll
    for (int v = 0; v < kVectors; ++v) {
      const int32_t group = first_group + kGroupStride * v;
      if (in_range || (group < hi && group + kGroupKeys > lo)) {
        at[v * kGroupStride / kGroupKeys] = nan_as_inf(ma[v]);
      }
    }
    return;
  }
#pragma unroll
  for (int v = 0; v < kVectors; ++v) {
    fold_group_parts(e, entries, lo, hi, first_group + kGroupStride * v, ma[v], mb[v]);
  }
}

// A decode consumer lane's fold of one score (the emitting consumers): the lanes of a quad
// column (lane / 4 = 0..7) hold the 8 keys of a group for the same (row, key half). Decode rows
// start at key 0, so a group meets one block; groups: block size 8. Call from the whole warp.
__device__ __forceinline__ void fold_consumer_score(const EmitParams& e, int64_t row, int32_t lo,
                                                    int32_t hi, int32_t key, float score,
                                                    bool groups, int lane) {
  float m = key >= lo && key < hi ? score : -INFINITY;
  m = max_keeping_nan(m, __shfl_xor_sync(0xffffffffu, m, 4));
  m = max_keeping_nan(m, __shfl_xor_sync(0xffffffffu, m, 8));
  m = max_keeping_nan(m, __shfl_xor_sync(0xffffffffu, m, 16));
  if (lane < 4) {
    const int32_t group = key & ~(kGroupKeys - 1);
    float* entries = e.block_max + row * e.block_pitch;
    if (groups) {
      store_group(entries, lo, hi, group, m, false);
    } else {
      fold_group_parts(e, entries, lo, hi, group, m, -INFINITY);
    }
  }
}

}  // namespace flashindexer::cuda::fused
