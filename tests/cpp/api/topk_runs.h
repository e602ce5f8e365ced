// SPDX-License-Identifier: Apache-2.0
// What the CPU topk_per_row tests share: logits with poisoned invisible columns, and a run of
// topk_per_row checked row by row against reference::topk_per_row.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "support/compare.h"

namespace fitest {

// Logits [rows, width] (f32 or bf16) with a padded row stride; columns outside a row's
// visible range and the padding hold values that would win if they were read (+inf, NaN).
inline HostTensor make_logits(Rng& rng, DType dtype, int64_t rows, int64_t width, Fill fill,
                              int64_t row_stride = 0) {
  HostTensor logits(dtype, {rows, width}, row_stride);
  const int64_t stride = logits.stride(0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < stride; ++s) {
      const float value = s < width ? random_logit(rng, fill) : kInf;
      if (dtype == DType::kBF16) {
        logits.data<uint16_t>()[r * stride + s] = float_to_bf16(value);
      } else {
        logits.data<float>()[r * stride + s] = value;
      }
    }
  }
  return logits;
}

inline void set_logit(HostTensor& logits, int64_t row, int64_t column, float value) {
  if (logits.view().dtype == DType::kBF16) {
    logits.at<uint16_t>({row, column}) = float_to_bf16(value);
  } else {
    logits.at<float>({row, column}) = value;
  }
}

// A NaN for poisoning (a NaN outranks nothing, so +inf is the stronger bait; both are used).
inline float random_nan_fixed() { return bits_float(0x7FC00001u); }

// Writes +inf into every column a row cannot see, so reading one changes the result.
inline void poison_invisible_columns(HostTensor& logits, const RowRanges& ranges) {
  for (int64_t r = 0; r < logits.size(0); ++r) {
    const reference::Range range = reference::row_range(ranges, r);
    for (int64_t s = 0; s < logits.size(1); ++s) {
      if (s < range.start || s >= range.end)
        set_logit(logits, r, s, (s % 2) ? kInf : random_nan_fixed());
    }
  }
}

struct TopKRun {
  int k = 64;
  bool sorted = false;
  int64_t out_cols = 0;    // 0 = k
  int64_t out_stride = 0;  // 0 = contiguous
  RunOptions options;
};

// Runs topk_per_row and the reference on the same arguments; every row must match and the
// output columns >= k stay untouched. The output is returned through `result`.
inline void check_topk(const HostTensor& logits, const RowRanges& ranges, const TopKRun& run,
                       HostTensor* result = nullptr) {
  const int64_t rows = logits.size(0);
  const int64_t cols = run.out_cols > 0 ? run.out_cols : run.k;
  HostTensor out = poisoned_topk_output(rows, cols, run.out_stride);
  FI_ASSERT_OK(
      topk_per_row(out.view(), logits.view(), ranges, run.k, TopKOptions{run.sorted}, run.options));
  HostTensor expected(DType::kI32, {rows, run.k});
  reference::topk_per_row(expected.view(), logits.view(), ranges, run.k);
  for (int64_t r = 0; r < rows; ++r) {
    const reference::Range range = reference::row_range(ranges, r);
    ASSERT_TRUE(TopKRowMatches(topk_row(out, r, run.k), topk_row(expected, r, run.k), run.sorted))
        << "row " << r << " visible [" << range.start << ", " << range.end << ") k=" << run.k
        << (run.sorted ? " sorted" : " unsorted");
  }
  EXPECT_TRUE(ColumnsBeyondKUntouched(out, run.k));
  if (result != nullptr) *result = std::move(out);
}

// Prefill ranges with odd (unaligned) starts, empty rows and rows around k.
inline void fill_ranges_around_k(Rng& rng, HostTensor& ks, HostTensor& ke, int64_t width, int k) {
  const int64_t rows = ks.size(0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t start = 2 * rng.uniform_int(0, width / 4) + 1;
    start = std::min(start, width);
    int64_t len = rng.uniform_int(0, width - start);
    const int64_t special[] = {0, 1, k - 1, k, k + 1};
    if (r < 5) len = special[r];
    len = std::min(len, width - start);
    if (r == 5) {
      start = 0;
      len = width;
    }
    ks.data<int32_t>()[r] = static_cast<int32_t>(start);
    ke.data<int32_t>()[r] = static_cast<int32_t>(start + len);
  }
}

}  // namespace fitest
