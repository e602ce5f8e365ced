// SPDX-License-Identifier: Apache-2.0
// Internal interface between the top-k launch code and its kernels (src/cuda/topk/).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/topk/config.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {

// What a launch does with a row that has no visible key: write its answer (k x -1, the op's
// contract), or leave it untouched, for a caller that owns only the answers of the rows it gives
// a range (the fused indexer's fallback, sm90_fused/select.h). A compile-time choice: the
// kernels that write every row carry no test for it.
enum class EmptyRows { kWrite, kLeave };

// Everything a top-k kernel reads, by value. Visible range of row r: prefill form
// [ks[r], ke[r]); decode form [0, end) with end from lengths (see RowRanges in topk.h).
// Ranges are clamped to [0, width] on the device, so bad values can never read out of bounds.
struct Params {
  const void* logits;  // [rows, width] f32 or bf16, row stride logits_stride
  int64_t logits_stride;
  int64_t width;
  int32_t* out;  // [rows, >= k] i32
  int64_t out_stride0;
  int64_t out_stride1;
  const int32_t* ks;  // prefill form, or nullptr
  int64_t ks_stride;
  const int32_t* ke;
  int64_t ke_stride;
  const int32_t* lengths;  // decode form: [rows], [B] with next_n, or [B, next_n]
  int64_t lengths_stride0;
  int64_t lengths_stride1;
  int lengths_columns;  // shape[1] of a rank-2 lengths, else 0
  int next_n;
  int k;
  int splits;  // CTAs per row; > 1 writes per-split candidates into the workspace
  int sorted;
  // Rank keys one split may hand the merge: kMergeCapacity / splits (>= k). A gated split's
  // survivors (~1.6-3.5 k per row, so more than k in one split when a row has 2 splits) fit.
  int split_capacity;
  uint64_t* split_keys;   // workspace: [rows, splits, split_capacity] rank keys
  int32_t* split_counts;  // workspace: [rows, splits]
};

// The output, row ranges, k and order of a launch over `width` columns (one split; no logits).
Params make_params(const TensorView& out, const RowRanges& ranges, int64_t width, int k,
                   bool sorted);

// Rank keys per CTA selection array: k rounded up to a power of two (bitonic sort width), 1 for
// k <= 1. Without a loop: the merge kernel computes it per row, and a doubling loop was ~4 % of
// the fused select's instructions at k = 2048 (ncu source counters, H32 prefill).
__host__ __device__ inline int selection_capacity(int k) {
  uint32_t v = k > 1 ? static_cast<uint32_t>(k - 1) : 0u;
  v |= v >> 1;
  v |= v >> 2;
  v |= v >> 4;
  v |= v >> 8;
  v |= v >> 16;
  return static_cast<int>(v + 1);
}

// The selection slots of a select over candidates in shared memory (the merge kernel, the fused
// indexer's select). Unsorted answers use them as the bitmap of their indices, so there are at
// least 2048 (16 KiB: one window of 131072 keys) whatever k.
__host__ __device__ inline int merge_selection_slots(int k) {
  constexpr int kBitmapSlots = 2048;
  const int slots = selection_capacity(k);
  return slots > kBitmapSlots ? slots : kBitmapSlots;
}

// kLeave runs over fp32 logits only (the fused indexer's fallback slab): bf16 answers
// cudaErrorNotSupported.
cudaError_t launch_segment_f32(const Params& params, int64_t rows, EmptyRows empty_rows,
                               cudaStream_t stream);
cudaError_t launch_segment_bf16(const Params& params, int64_t rows, EmptyRows empty_rows,
                                cudaStream_t stream);
cudaError_t launch_merge(const Params& params, int64_t rows, bool bf16, EmptyRows empty_rows,
                         cudaStream_t stream);

// Few long rows: one thread-block cluster per row (cluster_kernel.cu), no workspace needed.
cudaError_t launch_cluster(const Params& params, int64_t rows, bool bf16, EmptyRows empty_rows,
                           cudaStream_t stream);

// cuda::topk_per_row (cuda_ops.h) with the choice of what becomes of rows without a visible key.
Status per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
               bool sorted, const RunOptions& options, EmptyRows empty_rows);

}  // namespace flashindexer::cuda::topk
