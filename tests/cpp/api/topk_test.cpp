// SPDX-License-Identifier: Apache-2.0
// topk_per_row on CPU tensors (topk.h), prefill form: the selection against
// reference::topk_per_row, ties, NaN, padding, strides, k from 1 to 4096, thread counts.
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

// ----------------------------------------------------------------------------- prefill form

TEST(TopK, MatchesReferenceOnRandomF32Prefill) {
  FI_SEEDED_RNG(rng);
  for (int k : {7, 64, 512, 2048}) {
    for (bool sorted : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "k=" << k << (sorted ? " sorted" : " unsorted"));
      const int64_t rows = 24;
      const int64_t width = rng.uniform_int(1000, 3000);
      HostTensor logits =
          make_logits(rng, DType::kF32, rows, width, Fill::kRandom, width + rng.uniform_int(0, 17));
      HostTensor ks(DType::kI32, {rows});
      HostTensor ke(DType::kI32, {rows});
      fill_ranges_around_k(rng, ks, ke, width, k);
      const RowRanges ranges = RowRanges::prefill(ks.view(), ke.view());
      poison_invisible_columns(logits, ranges);
      TopKRun run;
      run.k = k;
      run.sorted = sorted;
      check_topk(logits, ranges, run);
    }
  }
}

TEST(TopK, MatchesReferenceOnRandomBf16Logits) {
  FI_SEEDED_RNG(rng);
  for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
    for (bool sorted : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "fill " << static_cast<int>(fill) << (sorted ? " sorted" : " unsorted"));
      const int64_t rows = 20;
      const int64_t width = rng.uniform_int(600, 2000);
      const int k = static_cast<int>(rng.uniform_int(1, 300));
      HostTensor logits = make_logits(rng, DType::kBF16, rows, width, fill, width + 8);
      HostTensor ks(DType::kI32, {rows});
      HostTensor ke(DType::kI32, {rows});
      fill_ranges_around_k(rng, ks, ke, width, k);
      const RowRanges ranges = RowRanges::prefill(ks.view(), ke.view());
      poison_invisible_columns(logits, ranges);
      TopKRun run;
      run.k = k;
      run.sorted = sorted;
      check_topk(logits, ranges, run);
    }
  }
}

// White-box: the CPU path guesses a floor from 128 runs of 16 scores spread evenly over a long
// row (src/cpu/topk.cpp). Here exactly those positions hold the largest scores, so the guess is
// far too high, fewer than k scores survive it, and the row must be rescanned: still exact.
TEST(TopK, ExactWhenTheSampledFloorIsTooHigh) {
  FI_SEEDED_RNG(rng);
  const int64_t width = 65536;
  HostTensor logits = make_logits(rng, DType::kF32, 2, width, Fill::kRandom);
  const int64_t line_stride = (width - 16) / 127;
  for (int64_t row = 0; row < 2; ++row) {
    for (int64_t line = 0; line < 128; ++line) {
      for (int64_t i = 0; i < 16; ++i) {
        logits.data<float>()[row * width + line * line_stride + i] =
            1000.0f + static_cast<float>(line * 16 + i);
      }
    }
  }
  HostTensor lengths = i32_tensor({static_cast<int32_t>(width), static_cast<int32_t>(width)});
  for (int k : {512, 2048}) {
    TopKRun run;
    run.k = k;
    check_topk(logits, RowRanges::decode(lengths.view()), run);
  }
}

TEST(TopK, TiesAtTheKthValueBreakTowardSmallerIndex) {
  FI_SEEDED_RNG(rng);
  for (bool sorted : {false, true}) {
    const int64_t rows = 16;
    const int64_t width = 1500;
    HostTensor logits = make_logits(rng, DType::kF32, rows, width, Fill::kFewTies);
    HostTensor ks(DType::kI32, {rows});
    HostTensor ke(DType::kI32, {rows});
    fill_ranges_around_k(rng, ks, ke, width, 300);
    TopKRun run;
    run.k = 300;
    run.sorted = sorted;
    check_topk(logits, RowRanges::prefill(ks.view(), ke.view()), run);
  }
  // Explicit: ten 5.0s among 1.0s; k = 4 takes the four 5.0s of smallest index.
  HostTensor logits(DType::kF32, {1, 100});
  logits.fill<float>(1.0f);
  const int64_t fives[] = {97, 3, 50, 12, 77, 8, 64, 31, 90, 45};
  for (int64_t i : fives) logits.at<float>({0, i}) = 5.0f;
  HostTensor lengths = i32_tensor({100});
  HostTensor out = poisoned_topk_output(1, 4);
  FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view()), 4,
                            TopKOptions{true}));
  EXPECT_EQ(topk_row(out, 0, 4), (std::vector<int32_t>{3, 8, 12, 31}));
}

TEST(TopK, AllEqualRowsSelectTheFirstKIndices) {
  for (bool sorted : {false, true}) {
    HostTensor logits(DType::kF32, {3, 700});
    logits.fill<float>(0.5f);
    HostTensor ks = i32_tensor({0, 1, 100});
    HostTensor ke = i32_tensor({700, 700, 200});
    const int k = 64;
    HostTensor out = poisoned_topk_output(3, k);
    FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::prefill(ks.view(), ke.view()),
                              k, TopKOptions{sorted}));
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int32_t> got = topk_row(out, r, k);
      if (!sorted) std::sort(got.begin(), got.end());
      std::vector<int32_t> expected(k);
      std::iota(expected.begin(), expected.end(), 0);
      EXPECT_EQ(got, expected) << "row " << r << (sorted ? " sorted" : " unsorted");
    }
  }
}

TEST(TopK, NanRanksBelowNegativeInfinity) {
  FI_SEEDED_RNG(rng);
  // Explicit: NaNs of both signs and +inf, -inf; the order is +inf, 1, -inf, then NaNs by index.
  HostTensor logits(DType::kF32, {1, 6});
  const float values[] = {bits_float(0xFFC00000u), -kInf, bits_float(0x7F800001u), 1.0f, kInf,
                          bits_float(0x7FFFFFFFu)};
  for (int i = 0; i < 6; ++i) logits.data<float>()[i] = values[i];
  HostTensor lengths = i32_tensor({6});
  HostTensor out = poisoned_topk_output(1, 5);
  FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view()), 5,
                            TopKOptions{true}));
  EXPECT_EQ(topk_row(out, 0, 5), (std::vector<int32_t>{4, 3, 1, 0, 2}));
  // Random mixes against the reference.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool sorted : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << (sorted ? " sorted" : " unsorted"));
      const int64_t rows = 16;
      const int64_t width = 1200;
      HostTensor mixed = make_logits(rng, dtype, rows, width, Fill::kSpecial);
      HostTensor ks(DType::kI32, {rows});
      HostTensor ke(DType::kI32, {rows});
      fill_ranges_around_k(rng, ks, ke, width, 200);
      TopKRun run;
      run.k = 200;
      run.sorted = sorted;
      check_topk(mixed, RowRanges::prefill(ks.view(), ke.view()), run);
    }
  }
}

TEST(TopK, AllNanRowReturnsTheFirstKIndices) {
  FI_SEEDED_RNG(rng);
  for (bool sorted : {false, true}) {
    HostTensor logits(DType::kF32, {2, 500});
    for (int64_t i = 0; i < 1000; ++i) logits.data<float>()[i] = random_nan(rng);
    HostTensor ks = i32_tensor({0, 37});
    HostTensor ke = i32_tensor({500, 437});
    const int k = 100;
    HostTensor out = poisoned_topk_output(2, k);
    FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::prefill(ks.view(), ke.view()),
                              k, TopKOptions{sorted}));
    for (int64_t r = 0; r < 2; ++r) {
      std::vector<int32_t> got = topk_row(out, r, k);
      if (!sorted) std::sort(got.begin(), got.end());
      std::vector<int32_t> expected(k);
      std::iota(expected.begin(), expected.end(), 0);
      EXPECT_EQ(got, expected) << "row " << r;
    }
  }
}

TEST(TopK, NegativeZeroTiesPositiveZeroBrokenByIndex) {
  for (bool negative_first : {true, false}) {
    HostTensor logits(DType::kF32, {1, 8});
    logits.fill<float>(-1.0f);
    logits.data<float>()[1] = negative_first ? -0.0f : 0.0f;
    logits.data<float>()[3] = negative_first ? 0.0f : -0.0f;
    HostTensor lengths = i32_tensor({8});
    HostTensor out1 = poisoned_topk_output(1, 1);
    FI_ASSERT_OK(topk_per_row(out1.view(), logits.view(), RowRanges::decode(lengths.view()), 1));
    EXPECT_EQ(out1.data<int32_t>()[0], 1)
        << (negative_first ? "-0 at 1, +0 at 3" : "+0 at 1, -0 at 3");
    HostTensor out2 = poisoned_topk_output(1, 2);
    FI_ASSERT_OK(topk_per_row(out2.view(), logits.view(), RowRanges::decode(lengths.view()), 2,
                              TopKOptions{true}));
    EXPECT_EQ(topk_row(out2, 0, 2), (std::vector<int32_t>{1, 3}));
  }
  // bf16 zeros too.
  HostTensor logits(DType::kBF16, {1, 4});
  const uint16_t bits[] = {float_to_bf16(-2.0f), float_to_bf16(0.0f), float_to_bf16(-0.0f),
                           float_to_bf16(-0.0f)};
  for (int i = 0; i < 4; ++i) logits.data<uint16_t>()[i] = bits[i];
  HostTensor lengths = i32_tensor({4});
  HostTensor out = poisoned_topk_output(1, 3);
  FI_ASSERT_OK(topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view()), 3,
                            TopKOptions{true}));
  EXPECT_EQ(topk_row(out, 0, 3), (std::vector<int32_t>{1, 2, 3}));
}

TEST(TopK, ShortRowsArePaddedWithMinusOneAndWiderOutputUntouched) {
  FI_SEEDED_RNG(rng);
  const int k = 64;
  // Lengths 0, 1, k-1, k, k+1 at odd starts, in both forms, into a wider, strided output.
  const std::vector<int32_t> lens = {0, 1, k - 1, k, k + 1, 300};
  const int64_t rows = static_cast<int64_t>(lens.size());
  const int64_t width = 420;
  HostTensor logits = make_logits(rng, DType::kF32, rows, width, Fill::kRandom);
  std::vector<int32_t> starts;
  std::vector<int32_t> ends;
  for (int64_t r = 0; r < rows; ++r) {
    starts.push_back(static_cast<int32_t>(2 * r + 1));
    ends.push_back(starts.back() + lens[r]);
  }
  HostTensor ks = i32_tensor(starts);
  HostTensor ke = i32_tensor(ends);
  HostTensor lengths = i32_tensor(lens);
  for (bool sorted : {false, true}) {
    TopKRun run;
    run.k = k;
    run.sorted = sorted;
    run.out_cols = k + 9;
    run.out_stride = k + 13;
    HostTensor out;
    ASSERT_NO_FATAL_FAILURE(
        check_topk(logits, RowRanges::prefill(ks.view(), ke.view()), run, &out));
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<int32_t> row = topk_row(out, r, k);
      const int64_t valid = std::min<int64_t>(lens[r], k);
      for (int64_t i = 0; i < k; ++i) {
        if (i < valid) {
          EXPECT_GE(row[i], 0) << "row " << r << " slot " << i;
          EXPECT_LT(row[i], lens[r])
              << "row " << r << " slot " << i << ": index not relative to ks";
        } else {
          EXPECT_EQ(row[i], -1) << "row " << r << " slot " << i;
        }
      }
    }
    check_topk(logits, RowRanges::decode(lengths.view()), run);
  }
}

TEST(TopK, IndicesAreRelativeToUnalignedRowStarts) {
  HostTensor logits(DType::kF32, {3, 50});
  logits.fill<float>(0.0f);
  logits.at<float>({0, 10}) = 9.0f;   // row 0 sees [7, 20): best at relative 3
  logits.at<float>({1, 44}) = 9.0f;   // row 1 sees [41, 50): best at relative 3
  logits.at<float>({1, 40}) = 99.0f;  // invisible to row 1
  logits.at<float>({2, 1}) = 9.0f;    // row 2 sees [1, 2): relative 0
  HostTensor ks = i32_tensor({7, 41, 1});
  HostTensor ke = i32_tensor({20, 50, 2});
  HostTensor out = poisoned_topk_output(3, 1);
  FI_ASSERT_OK(
      topk_per_row(out.view(), logits.view(), RowRanges::prefill(ks.view(), ke.view()), 1));
  EXPECT_EQ(out.data<int32_t>()[0], 3);
  EXPECT_EQ(out.data<int32_t>()[1], 3);
  EXPECT_EQ(out.data<int32_t>()[2], 0);
}

TEST(TopK, KEqualsOne) {
  FI_SEEDED_RNG(rng);
  for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
    const int64_t rows = 32;
    const int64_t width = 900;
    HostTensor logits = make_logits(rng, DType::kF32, rows, width, fill);
    HostTensor ks(DType::kI32, {rows});
    HostTensor ke(DType::kI32, {rows});
    fill_ranges_around_k(rng, ks, ke, width, 1);
    TopKRun run;
    run.k = 1;
    run.out_cols = 3;
    check_topk(logits, RowRanges::prefill(ks.view(), ke.view()), run);
  }
}

TEST(TopK, KEqualsTheMaximum4096) {
  FI_SEEDED_RNG(rng);
  const int k = kMaxTopK;
  ASSERT_EQ(k, 4096);
  for (Fill fill : {Fill::kRandom, Fill::kFewTies}) {
    for (bool sorted : {false, true}) {
      const int64_t width = 6500;
      const std::vector<int32_t> lens = {0, 1, k - 1, k, k + 1, 6500, 5000};
      HostTensor lengths = i32_tensor(lens);
      HostTensor logits =
          make_logits(rng, DType::kF32, static_cast<int64_t>(lens.size()), width, fill);
      TopKRun run;
      run.k = k;
      run.sorted = sorted;
      run.out_stride = k + 5;
      check_topk(logits, RowRanges::decode(lengths.view()), run);
    }
  }
}

TEST(TopK, IgnoresColumnsOutsideTheVisibleRange) {
  FI_SEEDED_RNG(rng);
  const int64_t rows = 12;
  const int64_t width = 800;
  HostTensor logits = make_logits(rng, DType::kF32, rows, width, Fill::kRandom, width + 32);
  HostTensor ks(DType::kI32, {rows});
  HostTensor ke(DType::kI32, {rows});
  fill_ranges_around_k(rng, ks, ke, width, 50);
  const RowRanges ranges = RowRanges::prefill(ks.view(), ke.view());
  poison_invisible_columns(logits, ranges);  // +inf / NaN everywhere a row cannot see
  TopKRun run;
  run.k = 50;
  run.sorted = true;
  check_topk(logits, ranges, run);
}

// ----------------------------------------------------------------------------- threads

TEST(TopK, ResultsIndependentOfThreadCount) {
  FI_SEEDED_RNG(rng);
  const int64_t rows = 48;
  const int64_t width = 3000;
  HostTensor logits = make_logits(rng, DType::kF32, rows, width, Fill::kFewTies);
  HostTensor ks(DType::kI32, {rows});
  HostTensor ke(DType::kI32, {rows});
  fill_ranges_around_k(rng, ks, ke, width, 512);
  const RowRanges ranges = RowRanges::prefill(ks.view(), ke.view());
  for (bool sorted : {false, true}) {
    SCOPED_TRACE(sorted ? "sorted" : "unsorted");
    std::vector<int32_t> first;
    for (int threads : {1, 2, 4, 1}) {
      TopKRun run;
      run.k = 512;
      run.sorted = sorted;
      run.options.cpu_threads = threads;
      HostTensor out;
      ASSERT_NO_FATAL_FAILURE(check_topk(logits, ranges, run, &out));
      std::vector<int32_t> all(out.data<int32_t>(), out.data<int32_t>() + rows * 512);
      if (first.empty()) {
        first = all;
      } else {
        ASSERT_EQ(all, first) << "cpu_threads=" << threads << " changed the output";
      }
    }
  }
}

}  // namespace
}  // namespace fitest
