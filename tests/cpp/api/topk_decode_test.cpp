// SPDX-License-Identifier: Apache-2.0
// topk_per_row on CPU tensors (topk.h), decode form: per-row lengths, request lengths with
// next_n, two-dimensional lengths, against reference::topk_per_row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "support/compare.h"
#include "topk_runs.h"

namespace fitest {
namespace {

// ----------------------------------------------------------------------------- decode form

TEST(TopK, DecodeFormPerRowLengths) {
  FI_SEEDED_RNG(rng);
  for (bool sorted : {false, true}) {
    const int64_t rows = 30;
    const int64_t width = 2000;
    HostTensor logits = make_logits(rng, DType::kF32, rows, width, Fill::kRandom);
    std::vector<int32_t> lens(rows);
    for (auto& len : lens) len = static_cast<int32_t>(rng.uniform_int(0, width));
    lens[0] = 0;
    lens[1] = static_cast<int32_t>(width);
    HostTensor lengths = i32_tensor(lens);
    const RowRanges ranges = RowRanges::decode(lengths.view());
    poison_invisible_columns(logits, ranges);
    TopKRun run;
    run.k = 256;
    run.sorted = sorted;
    check_topk(logits, ranges, run);
  }
}

TEST(TopK, DecodeFormRequestLengthsWithNextN) {
  FI_SEEDED_RNG(rng);
  for (int next_n = 2; next_n <= 4; ++next_n) {
    for (bool sorted : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "next_n=" << next_n << (sorted ? " sorted" : " unsorted"));
      const int64_t batch = 7;
      const int64_t width = 1500;
      HostTensor logits = make_logits(rng, DType::kF32, batch * next_n, width, Fill::kFewTies);
      std::vector<int32_t> lens(batch);
      for (auto& len : lens) len = static_cast<int32_t>(rng.uniform_int(0, width));
      lens[0] = 1;  // shorter than next_n: the first rows see nothing
      lens[1] = next_n - 1;
      lens[2] = static_cast<int32_t>(width);
      HostTensor lengths = i32_tensor(lens);
      const RowRanges ranges = RowRanges::decode(lengths.view(), next_n);
      for (int64_t r = 0; r < batch * next_n; ++r) {
        const int64_t expected_end =
            std::max<int64_t>(0, lens[r / next_n] - next_n + r % next_n + 1);
        ASSERT_EQ(reference::row_range(ranges, r).end, expected_end);
      }
      poison_invisible_columns(logits, ranges);
      TopKRun run;
      run.k = 128;
      run.sorted = sorted;
      check_topk(logits, ranges, run);
    }
  }
}

TEST(TopK, DecodeFormTwoDimLengths) {
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    SCOPED_TRACE(::testing::Message() << "next_n=" << next_n);
    const int64_t batch = 5;
    const int64_t width = 1000;
    HostTensor logits = make_logits(rng, DType::kF32, batch * next_n, width, Fill::kRandom);
    HostTensor lengths(DType::kI32, {batch, next_n});
    for (int64_t i = 0; i < batch * next_n; ++i) {
      lengths.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(0, width));
    }
    lengths.data<int32_t>()[0] = 0;
    const RowRanges ranges = RowRanges::decode(lengths.view(), next_n);
    poison_invisible_columns(logits, ranges);
    TopKRun run;
    run.k = 100;
    run.sorted = true;
    check_topk(logits, ranges, run);
  }
}

TEST(TopK, NextNFormulaBelowZeroSeesNoKey) {
  FI_SEEDED_RNG(rng);
  // lengths [B] with next_n = 4: request 0 has 2 keys, so its rows 0 and 1 see 2 - 4 + j + 1 <= 0.
  HostTensor logits = make_logits(rng, DType::kF32, 8, 100, Fill::kRandom);
  HostTensor lengths = i32_tensor({2, 100});
  HostTensor out = poisoned_topk_output(8, 16);
  FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view(), 4), 16));
  for (int64_t r : {0, 1}) {
    EXPECT_EQ(topk_row(out, r, 16), std::vector<int32_t>(16, -1)) << "row " << r;
  }
  TopKRun run;
  run.k = 16;
  check_topk(logits, RowRanges::decode(lengths.view(), 4), run);
}

}  // namespace
}  // namespace fitest
