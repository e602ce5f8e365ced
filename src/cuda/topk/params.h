// Internal interface between the top-k launch code and its kernels (src/cuda/topk/).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/topk/config.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {

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
  // The fused indexer's fallback (fused_indexer.cu): rows with no visible key are left untouched
  // (their answers come from its select), instead of being written as -1 rows.
  int leave_empty_rows;
  // The fused indexer's select (a merge over emitted candidates, no logits): the visible range of
  // each row whose candidates are incomplete, [0, 0) for the others, for its fallback to score
  // and select. fallback_lo may be nullptr (decode: the ranges start at 0).
  int32_t* fallback_lo;  // [rows]
  int32_t* fallback_hi;  // [rows]
  int32_t* fallback_rows;  // [1] counts the rows given a fallback range (zeroed before), or nullptr
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

cudaError_t launch_segment_f32(const Params& params, int64_t rows, cudaStream_t stream);
cudaError_t launch_segment_bf16(const Params& params, int64_t rows, cudaStream_t stream);
cudaError_t launch_merge(const Params& params, int64_t rows, bool bf16, cudaStream_t stream);

// Few long rows: one thread-block cluster per row (cluster_kernel.cu), no workspace needed.
cudaError_t launch_cluster(const Params& params, int64_t rows, bool bf16, cudaStream_t stream);

}  // namespace flashindexer::cuda::topk
