// SPDX-License-Identifier: Apache-2.0
// The visible key range of one query row, as the scoring kernel and the clean fill see it. It is
// the rule of core/rows.h (prefill_range, decode_end, decode_range), written out here rather than
// called: routed through those functions, ptxas scheduled every scoring instantiation
// differently (the same instructions in another order and allocation), and this kernel's code is
// held to its measured form. The GPU tests compare both against the reference, which calls
// core/rows.h.
#pragma once

#include <cstdint>

#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {

// A decode row's end of keys (it sees them from position 0), clamped to what exists.
__device__ __forceinline__ int32_t clamp_decode_end(const ScoreParams& p, int64_t end) {
  const int64_t limit = min(p.width, p.table_pages * p.page_size);
  return static_cast<int32_t>(min(max(end, int64_t{0}), limit));
}

// The visible key range of query `row` (clamped to what exists), as [lo, hi) with lo <= hi.
template <bool kPaged>
__device__ __forceinline__ void row_range(const ScoreParams& p, int64_t row, int32_t& lo,
                                          int32_t& hi) {
  if constexpr (kPaged) {
    const int32_t b = static_cast<int32_t>(row) / p.rows_per_group;  // rows < 2^31 (checked)
    const int j = static_cast<int>(row) - b * p.rows_per_group;
    const int32_t* lens = p.context_lens + b * p.lens_stride_b;
    lo = 0;
    hi = clamp_decode_end(
        p, p.lens_2d ? lens[j * p.lens_stride_j] : lens[0] - p.rows_per_group + j + 1);
  } else {
    const int64_t limit = min(p.width, p.num_keys);
    const int64_t first = min(max(static_cast<int64_t>(p.ks[row]), int64_t{0}), limit);
    lo = static_cast<int32_t>(first);
    hi = static_cast<int32_t>(min(max(static_cast<int64_t>(p.ke[row]), first), limit));
  }
}

}  // namespace flashindexer::cuda::scoring
