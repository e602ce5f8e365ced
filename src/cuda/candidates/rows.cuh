// SPDX-License-Identifier: Apache-2.0
// The row bounds of the candidate kernels, read on the device: vLLM's (ks, ke) per bound row with
// row_repeat logits rows per bound row (candidates.h), or the indexer's causal decode form (ke =
// context_lens[b] - next_n + j + 1, never below 0) for a consumer call with 1-D context lengths.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashindexer/candidates.h"

namespace flashindexer::cuda::candidates {

struct BoundRows {
  const int32_t* ks = nullptr;  // null: every row starts at 0
  int64_t ks_stride = 1;
  const int32_t* ke = nullptr;  // null: ke = 0 (rows of sparse_topk_remap, which reads ks only)
  int64_t ke_stride0 = 1;       // ke [B] or [B, n]: element (r / n, r % n)
  int64_t ke_stride1 = 1;
  int64_t ke_columns = 1;
  int row_repeat = 1;
  int causal_next_n = 0;  // > 0: the causal decode form, bound row = request

  __device__ __forceinline__ int64_t ks_of(int64_t t) const {
    return ks == nullptr ? 0 : ks[(t / row_repeat) * ks_stride];
  }
  __device__ __forceinline__ int64_t ke_of(int64_t t) const {
    if (ke == nullptr) return 0;
    if (causal_next_n > 0) {
      const int64_t end = static_cast<int64_t>(ke[(t / causal_next_n) * ke_stride0]) -
                          causal_next_n + t % causal_next_n + 1;
      return end < 0 ? 0 : end;
    }
    const int64_t r = t / row_repeat;
    return ke[(r / ke_columns) * ke_stride0 + (r % ke_columns) * ke_stride1];
  }
};

// The visible columns [start, start + count) of a row of a logits `width` wide: [ks, min(ke,
// width)), with ks < 0 read as 0 and ke < ks as ks (device values are not checked).
struct Visible {
  int64_t start;
  int64_t count;
};

__device__ __forceinline__ Visible visible_of(const BoundRows& rows, int64_t t, int64_t width) {
  int64_t start = rows.ks_of(t);
  start = start < 0 ? 0 : (start > width ? width : start);
  int64_t end = rows.ke_of(t);
  end = end < start ? start : (end > width ? width : end);
  return {start, end - start};
}

inline BoundRows bound_rows_of(const CandidateRows& rows) {
  BoundRows b;
  if (rows.ks.defined()) {
    b.ks = static_cast<const int32_t*>(rows.ks.data);
    b.ks_stride = rows.ks.stride[0];
  }
  if (rows.ke.defined()) {
    b.ke = static_cast<const int32_t*>(rows.ke.data);
    b.ke_stride0 = rows.ke.stride[0];
    if (rows.ke.rank == 2) {
      b.ke_columns = rows.ke.shape[1];
      b.ke_stride1 = rows.ke.stride[1];
    }
  }
  b.row_repeat = rows.row_repeat;
  return b;
}

}  // namespace flashindexer::cuda::candidates
