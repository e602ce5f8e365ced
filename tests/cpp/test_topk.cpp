// Selection on CPU tensors (topk.h): topk_per_row against reference::topk_per_row.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "cpu/topk/select.h"
#include "test_inputs.h"

namespace fitest {
namespace {

// Logits [rows, width] (f32 or bf16) with a padded row stride; columns outside a row's
// visible range and the padding hold values that would win if they were read (+inf, NaN).
HostTensor make_logits(Rng& rng, DType dtype, int64_t rows, int64_t width, Fill fill,
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

void set_logit(HostTensor& logits, int64_t row, int64_t column, float value) {
  if (logits.view().dtype == DType::kBF16) {
    logits.at<uint16_t>({row, column}) = float_to_bf16(value);
  } else {
    logits.at<float>({row, column}) = value;
  }
}

// A NaN for poisoning (a NaN outranks nothing, so +inf is the stronger bait; both are used).
float random_nan_fixed() { return bits_float(0x7FC00001u); }

// Writes +inf into every column a row cannot see, so reading one changes the result.
void poison_invisible_columns(HostTensor& logits, const RowRanges& ranges) {
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
void check_topk(const HostTensor& logits, const RowRanges& ranges, const TopKRun& run,
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
void fill_ranges_around_k(Rng& rng, HostTensor& ks, HostTensor& ke, int64_t width, int k) {
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

TEST(TopK, RejectsNegativeLength) {
  FI_SEEDED_RNG(rng);
  HostTensor logits = make_logits(rng, DType::kF32, 4, 100, Fill::kRandom);
  HostTensor lengths = i32_tensor({-5, 10, -1, 100});
  HostTensor out = poisoned_topk_output(4, 16);
  const Status status =
      topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view()), 16);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("lengths"), std::string::npos) << status.message();
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

// ----------------------------------------------------------------------------- selection core

// keep_largest (the selection behind every CPU top-k) against a full sort: random keys, keys
// sharing long prefixes (one score, neighbouring indices), a few distinct scores (large tie
// classes in the histogram's boundary bin), a tight cluster with far outliers (most keys in one
// bin), the extreme key values, and k from 0 to n; sizes on both sides of the histogram path.
TEST(SelectCore, KeepLargestEqualsTheSortedPrefix) {
  FI_SEEDED_RNG(rng);
  std::vector<std::vector<uint64_t>> inputs;
  for (size_t n : {1, 2, 3, 17, 300, 511, 512, 3000, 5000}) {
    std::vector<uint64_t> keys(n);
    for (uint64_t& key : keys) key = static_cast<uint64_t>(rng.bits32()) << 32 | rng.bits32();
    inputs.push_back(keys);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = cpu::rank_key_of_score(1.5f, static_cast<uint32_t>(i * 7 % n));
    }
    inputs.push_back(keys);  // one score, distinct indices: only the low bits differ
    for (size_t i = 0; i < n; ++i) {
      keys[i] = cpu::rank_key_of_score(static_cast<float>(rng.uniform_int(0, 3)),
                                       static_cast<uint32_t>(i));
    }
    rng.shuffle(keys);
    inputs.push_back(keys);  // four scores
    for (size_t i = 0; i < n; ++i) {
      const float score = i % 97 == 0 ? -1e30f : 100.0f + 1e-5f * rng.normal();
      keys[i] = cpu::rank_key_of_score(score, static_cast<uint32_t>(i));
    }
    inputs.push_back(keys);  // a cluster and far outliers
  }
  inputs.push_back({0, ~uint64_t{0}, 1, ~uint64_t{0} - 1, uint64_t{1} << 63});
  for (const std::vector<uint64_t>& input : inputs) {
    std::vector<uint64_t> descending = input;
    std::sort(descending.begin(), descending.end(), std::greater<uint64_t>());
    for (size_t k = 0; k <= input.size(); k += 1 + input.size() / 7) {
      for (bool sorted : {false, true}) {
        std::vector<uint64_t> keys = input;
        ASSERT_EQ(cpu::keep_largest(keys.data(), keys.size(), k, sorted), k);
        keys.resize(k);
        if (!sorted) std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
        ASSERT_TRUE(std::equal(keys.begin(), keys.end(), descending.begin()))
            << "n=" << input.size() << " k=" << k << (sorted ? " sorted" : "");
      }
    }
  }
}

// write_indices: best first as given when sorted, else ascending (a radix sort of as many 11-bit
// digits as the largest index has: 1 to 3 passes; fewer than 64 indices by std::sort), then -1
// up to k.
TEST(SelectCore, WriteIndicesOrdersUnsortedAnswersByIndex) {
  FI_SEEDED_RNG(rng);
  for (uint32_t largest : {200u, 60000u, 5000000u, 0x7fffffffu}) {
    for (size_t count : {0, 1, 2, 255, 2048}) {
      SCOPED_TRACE(::testing::Message() << "largest=" << largest << " count=" << count);
      std::vector<uint64_t> keys(count);
      std::vector<int32_t> indices(count);
      for (size_t i = 0; i < count; ++i) {
        // Distinct indices; the largest one always there (its digits set the passes).
        const auto odd = static_cast<uint32_t>(rng.uniform_int(0, (largest - 1) / 2)) * 2 + 1;
        indices[i] = static_cast<int32_t>(i == 0 ? largest : odd);
      }
      std::sort(indices.begin(), indices.end());
      indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
      rng.shuffle(indices);
      for (size_t i = 0; i < indices.size(); ++i) {
        keys[i] = cpu::rank_key_of_score(rng.normal(), static_cast<uint32_t>(indices[i]));
      }
      const int k = static_cast<int>(count) + 3;
      for (bool sorted : {false, true}) {
        std::vector<uint64_t> scratch(keys.begin(), keys.begin() + indices.size());
        std::vector<int32_t> out(static_cast<size_t>(k), 12345);
        cpu::write_indices(out.data(), scratch.data(), indices.size(), k, sorted);
        std::vector<int32_t> expected = indices;
        if (!sorted) std::sort(expected.begin(), expected.end());
        expected.resize(static_cast<size_t>(k), -1);
        EXPECT_EQ(out, expected) << (sorted ? "sorted" : "unsorted");
      }
    }
  }
}

// largest_at_rank (the sampled floor's order statistic) against a full sort, with duplicates.
TEST(SelectCore, LargestAtRankEqualsTheSortedValue) {
  FI_SEEDED_RNG(rng);
  for (size_t n : {1, 5, 256, 257, 511, 512, 2048, 40000}) {
    for (uint32_t distinct : {1u, 7u, 0xFFFFFFFFu}) {
      std::vector<uint32_t> values(n);
      for (uint32_t& value : values) {
        value = distinct == 0xFFFFFFFFu ? rng.bits32() : 0x80000000u + rng.bits32() % distinct;
      }
      std::vector<uint32_t> descending = values;
      std::sort(descending.begin(), descending.end(), std::greater<uint32_t>());
      for (size_t rank = 0; rank < n; rank += 1 + n / 5) {
        std::vector<uint32_t> scratch = values;
        ASSERT_EQ(cpu::largest_at_rank(scratch.data(), n, rank), descending[rank])
            << "n=" << n << " distinct=" << distinct << " rank=" << rank;
      }
    }
  }
}

// ----------------------------------------------------------------------------- bad input

struct TopKArgs {
  HostTensor logits;
  HostTensor ks;
  HostTensor ke;
  HostTensor out;
  int k = 8;
  Status call() const {
    return call_with(out.view(), logits.view(), RowRanges::prefill(ks.view(), ke.view()), k);
  }
  Status call_with(const TensorView& out_view, const TensorView& logits_view,
                   const RowRanges& ranges, int top_k) const {
    return topk_per_row(out_view, logits_view, ranges, top_k);
  }
};

TopKArgs topk_args() {
  TopKArgs a;
  a.logits = HostTensor(DType::kF32, {4, 100});
  a.logits.fill<float>(1.0f);
  a.ks = i32_tensor({0, 3, 50, 99});
  a.ke = i32_tensor({100, 40, 50, 100});
  a.out = poisoned_topk_output(4, 8);
  return a;
}

TEST(TopK, AcceptsTheValidBaseline) { FI_EXPECT_OK(topk_args().call()); }

TEST(TopK, RejectsLogitsOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor logits(DType::kI32, {4, 100});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsOutputOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor out(DType::kI64, {4, 8});
  EXPECT_TRUE(IsRejected(
      a.call_with(out.view(), a.logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsViewsOfMoreDimensionsThanAViewHolds) {
  // contiguous() with more than kMaxRank extents: a view of that rank, refused by name.
  TopKArgs a = topk_args();
  const TensorView logits =
      TensorView::contiguous(a.logits.view().data, DType::kF32, {1, 1, 1, 1, 1, 1, 4, 100});
  EXPECT_EQ(logits.rank, 8);
  EXPECT_EQ(logits.numel(), 0);
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits has rank 8"}));
}

TEST(TopK, RejectsKZero) {
  TopKArgs a = topk_args();
  a.k = 0;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"k"}));
}

TEST(TopK, RejectsKAboveTheMaximum) {
  TopKArgs a = topk_args();
  a.k = 4097;
  a.out = poisoned_topk_output(4, 4097);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call(), {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"k=4097"}));
}

TEST(TopK, RejectsOutputNarrowerThanK) {
  TopKArgs a = topk_args();
  a.out = poisoned_topk_output(4, 7);
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsOutputRowStrideBelowK) {
  TopKArgs a = topk_args();
  TensorView out = a.out.view();
  out.stride[0] = 7;
  EXPECT_TRUE(
      IsRejected(a.call_with(out, a.logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsOutputWithOtherRowCount) {
  TopKArgs a = topk_args();
  a.out = poisoned_topk_output(3, 8);
  EXPECT_TRUE(IsRejectedNamingAnyOf(a.call(), {StatusCode::kInvalidArgument}, {"out"}));
}

TEST(TopK, RejectsLogitsInnerStrideOtherThanOne) {
  TopKArgs a = topk_args();
  HostTensor buffer(DType::kF32, {4, 200});
  TensorView logits = buffer.view();
  logits.shape[1] = 100;
  logits.stride[1] = 2;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsLogitsRowStrideBelowWidth) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.stride[0] = 99;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsKsGreaterThanKe) {
  TopKArgs a = topk_args();
  a.ks.data<int32_t>()[2] = 51;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsNegativeKs) {
  TopKArgs a = topk_args();
  a.ks.data<int32_t>()[1] = -3;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsKeBeyondTheWidth) {
  TopKArgs a = topk_args();
  a.ke.data<int32_t>()[3] = 101;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ke"}));
}

TEST(TopK, RejectsRangesOfWrongLength) {
  TopKArgs a = topk_args();
  HostTensor ks = i32_tensor({0, 0, 0});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsRangesOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor ke(DType::kF32, {4});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(a.ks.view(), ke.view()), 8),
      StatusCode::kInvalidArgument, {"ke"}));
}

TEST(TopK, RejectsDecodeLengthBeyondTheWidth) {
  TopKArgs a = topk_args();
  // The condition involves two arguments: the message may name either.
  HostTensor lengths = i32_tensor({10, 101, 0, 5});
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view()), 8),
      {StatusCode::kInvalidArgument}, {"lengths", "logits"}));
  HostTensor request_lengths = i32_tensor({101, 4});  // next_n = 2: row 1 sees 101 columns
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(request_lengths.view(), 2), 8),
      {StatusCode::kInvalidArgument}, {"lengths", "logits"}));
}

TEST(TopK, RejectsLengthsOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor lengths(DType::kF32, {4});
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view()), 8),
                 StatusCode::kInvalidArgument, {"lengths"}));
}

TEST(TopK, RejectsLengthsNotMatchingTheRows) {
  TopKArgs a = topk_args();
  HostTensor lengths = i32_tensor({10, 10, 10});  // neither [rows] nor [rows / next_n]
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view(), 2), 8),
      StatusCode::kInvalidArgument, {"lengths"}));
}

TEST(TopK, RejectsNextNBelowOne) {
  TopKArgs a = topk_args();
  HostTensor lengths = i32_tensor({10, 10, 10, 10});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view(), 0), 8),
      StatusCode::kInvalidArgument, {"next_n"}));
}

TEST(TopK, RejectsNullData) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.data = nullptr;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
  TensorView ks = a.ks.view();
  ks.data = nullptr;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(ks, a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsCudaTensorMixedWithCpuTensors) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.device = Device::kCUDA;
  const Status status =
      a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == StatusCode::kInvalidArgument ||
              status.code() == StatusCode::kUnsupported)
      << status_text(status);
  for (int64_t i = 0; i < 32; ++i)
    ASSERT_EQ(a.out.data<int32_t>()[i], kPoisonIndex) << "a rejected call wrote out";
}

}  // namespace
}  // namespace fitest
