// The visible key range of one query row, as the scoring kernel and the clean fill see it.
#pragma once

#include <cstdint>

#include "cuda/scoring/score_params.h"

namespace flashindexer::cuda::scoring {

// The visible key range of query `row` (clamped to what exists), as [lo, hi) with lo <= hi.
template <bool kPaged>
__device__ __forceinline__ void row_range(const ScoreParams& p, int64_t row, int32_t& lo,
                                          int32_t& hi) {
  int64_t first = 0;
  int64_t last = 0;
  int64_t limit = 0;
  if constexpr (kPaged) {
    const int32_t b = static_cast<int32_t>(row) / p.rows_per_group;  // rows < 2^31 (checked)
    const int j = static_cast<int>(row) - b * p.rows_per_group;
    const int32_t* lens = p.context_lens + b * p.lens_stride_b;
    last = p.lens_2d ? lens[j * p.lens_stride_j] : lens[0] - p.rows_per_group + j + 1;
    limit = min(p.width, p.table_pages * p.page_size);
  } else {
    first = p.ks[row];
    last = p.ke[row];
    limit = min(p.width, p.num_keys);
  }
  first = min(max(first, int64_t{0}), limit);
  last = min(max(last, first), limit);
  lo = static_cast<int32_t>(first);
  hi = static_cast<int32_t>(last);
}

}  // namespace flashindexer::cuda::scoring
