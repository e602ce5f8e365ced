// SPDX-License-Identifier: Apache-2.0
// The fused indexer's select and its fallback's top-k (select_kernel.cu): the two steps that turn
// a batch's emitted candidates into answers (fused_indexer.cu, steps 4 and 5).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/params.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::fused {

// What the select reads and writes, by value.
struct SelectParams {
  // The answers: out, the rows' visible ranges, k and order (topk::make_params; no logits).
  topk::Params answer;
  // The emitted candidates: row r's rank keys at candidates[r * capacity, + counts[r]), in the
  // order the emission's atomics were served. A count above capacity: keys were dropped (the
  // emission counts on past its slots).
  const uint64_t* candidates;
  const int32_t* counts;
  int capacity;  // 8192 or 16384 (the fused indexer's candidate_capacity)
  // The visible range of each row whose candidates are incomplete (fewer than min(k, length), or
  // some dropped), [0, 0) for the others, for the fallback to score and select; nullptr when no
  // row can be incomplete (no row is gated). fallback_lo may be nullptr (decode: the ranges start
  // at 0).
  int32_t* fallback_lo;    // [rows]
  int32_t* fallback_hi;    // [rows]
  int32_t* fallback_rows;  // [1] counts the rows given a fallback range (zeroed before), or nullptr
};

// One CTA per row: each complete row's k best candidates, best first when sorted, else in
// ascending index order (never in slot order); an incomplete row gets only its fallback range.
cudaError_t launch_select(const SelectParams& params, int64_t rows, cudaStream_t stream);

// topk_per_row over the fallback's logits (fp32), writing only the rows that have a visible
// range: the others' answers, written by the select, are left untouched.
Status fallback_topk(const TensorView& out, const TensorView& logits, const RowRanges& ranges,
                     int k, bool sorted, const RunOptions& options);

}  // namespace flashindexer::cuda::fused
