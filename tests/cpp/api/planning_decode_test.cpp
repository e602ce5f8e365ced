// SPDX-License-Identifier: Apache-2.0
// Decode metadata (planning.h): flattened and native per-token lengths against the
// specification's formulas, pack/unpack round trips, and the decode row-chunking rule.
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

#include "planning_transcription.h"
#include "support/compare.h"
#include "support/seed.h"

namespace fitest {
namespace {

struct DecodeBatch {
  int next_n = 1;
  std::vector<int64_t> seq_lens, query_lens;
  int64_t tokens = 0;
};

DecodeBatch random_decode_batch(Rng& rng, bool uniform) {
  DecodeBatch batch;
  batch.next_n = static_cast<int>(rng.uniform_int(1, 4));
  const int64_t requests = rng.uniform_int(0, 20);
  for (int64_t b = 0; b < requests; ++b) {
    const int64_t d = uniform ? batch.next_n : rng.uniform_int(1, batch.next_n);
    batch.seq_lens.push_back(rng.uniform_int(d, 2000));
    batch.query_lens.push_back(d);
    batch.tokens += d;
  }
  return batch;
}

RowBoundsOptions random_options(Rng& rng) {
  RowBoundsOptions options;
  options.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 4, 128}));
  if (rng.bernoulli(0.5)) {
    options.dcp = {static_cast<int>(rng.uniform_int(1, 4)),
                   static_cast<int>(rng.uniform_int(1, 3))};
    options.dcp_rank = static_cast<int>(rng.uniform_int(0, options.dcp.ranks - 1));
  }
  return options;
}

int64_t localized(int64_t length, const RowBoundsOptions& o) {
  return transcription::local_len(length, o.dcp_rank, o.dcp.ranks, o.dcp.interleave);
}

TEST(DecodeFlatLens, MatchTheSpecificationWithPaddingRows) {
  FI_SEEDED_RNG(rng);
  std::printf("DecodeFlatLens random seed %llu\n", static_cast<unsigned long long>(rng_seed));
  for (int trial = 0; trial < 2000; ++trial) {
    const DecodeBatch batch = random_decode_batch(rng, false);
    const RowBoundsOptions options = random_options(rng);
    const int64_t padding = rng.uniform_int(0, 5);
    const int64_t requests = static_cast<int64_t>(batch.seq_lens.size());
    std::vector<int32_t> lens(batch.tokens + padding, -7), rows(batch.tokens + padding, -7);
    FI_ASSERT_OK(
        decode_flat_lens(lens, rows, batch.seq_lens, batch.query_lens, batch.next_n, options));
    int64_t row = 0;
    for (int64_t b = 0; b < requests; ++b) {
      const int64_t L = batch.seq_lens[b], d = batch.query_lens[b];
      for (int64_t i = 0; i < d; ++i, ++row) {
        ASSERT_EQ(lens[row], localized(((L - d) + i + 1) / options.compress_ratio, options));
        ASSERT_EQ(rows[row], b);
      }
    }
    for (int64_t k = 0; k < padding; ++k, ++row) {
      ASSERT_EQ(lens[row], 0);
      ASSERT_EQ(rows[row], requests + k);
    }
  }
}

TEST(DecodeNativeLens, MatchTheSpecificationAndTheFlattenedFormWhenUniform) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 2000; ++trial) {
    const DecodeBatch batch = random_decode_batch(rng, true);
    const RowBoundsOptions options = random_options(rng);
    std::vector<int64_t> seq_lens = batch.seq_lens;
    // Native rows may be shorter than next_n (clamped at 0).
    for (int64_t& L : seq_lens) L = rng.bernoulli(0.2) ? rng.uniform_int(0, batch.next_n) : L;
    const int64_t requests = static_cast<int64_t>(seq_lens.size());
    std::vector<int32_t> native(requests * batch.next_n, -7);
    FI_ASSERT_OK(decode_native_lens(native, seq_lens, batch.next_n, options));
    for (int64_t b = 0; b < requests; ++b) {
      for (int j = 0; j < batch.next_n; ++j) {
        const int64_t visible = std::max<int64_t>(0, seq_lens[b] - batch.next_n + j + 1);
        ASSERT_EQ(native[b * batch.next_n + j],
                  localized(visible / options.compress_ratio, options));
      }
    }
    std::vector<int32_t> native_full(requests * batch.next_n), flat(batch.tokens);
    FI_ASSERT_OK(decode_native_lens(native_full, batch.seq_lens, batch.next_n, options));
    FI_ASSERT_OK(
        decode_flat_lens(flat, {}, batch.seq_lens, batch.query_lens, batch.next_n, options));
    ASSERT_EQ(native_full, flat);
  }
}

TEST(DecodePackMap, PackThenUnpackIsTheIdentity) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 1000; ++trial) {
    const DecodeBatch batch = random_decode_batch(rng, false);
    int max_d = 1;
    for (int64_t d : batch.query_lens) max_d = std::max<int>(max_d, static_cast<int>(d));
    const int64_t requests = static_cast<int64_t>(batch.query_lens.size());
    std::vector<int32_t> packed_row(batch.tokens), token_of(requests * max_d);
    FI_ASSERT_OK(decode_pack_map(packed_row, token_of, batch.query_lens, max_d));
    // Rows of 3 values each: pack (left-aligned, padding = a sentinel), then unpack.
    constexpr int kWidth = 3;
    std::vector<float> flat(batch.tokens * kWidth);
    for (float& v : flat) v = rng.normal();
    std::vector<float> packed(requests * max_d * kWidth);
    for (int64_t p = 0; p < requests * max_d; ++p) {
      for (int c = 0; c < kWidth; ++c) {
        packed[p * kWidth + c] = token_of[p] < 0 ? -1e30f : flat[token_of[p] * kWidth + c];
      }
    }
    std::vector<float> unpacked(batch.tokens * kWidth);
    for (int64_t t = 0; t < batch.tokens; ++t) {
      for (int c = 0; c < kWidth; ++c)
        unpacked[t * kWidth + c] = packed[packed_row[t] * kWidth + c];
    }
    ASSERT_EQ(unpacked, flat);
    // Left alignment: request b's token i sits at [b, i]; the rest of the row is padding.
    int64_t token = 0;
    for (int64_t b = 0; b < requests; ++b) {
      for (int i = 0; i < max_d; ++i) {
        const bool real = i < batch.query_lens[b];
        ASSERT_EQ(token_of[b * max_d + i], real ? token : -1);
        if (real) ++token;
      }
    }
  }
}

TEST(DecodeRowRanges, MatchTheSpecificationLargestFirst) {
  FI_SEEDED_RNG(rng);
  std::printf("DecodeRowRanges random seed %llu\n", static_cast<unsigned long long>(rng_seed));
  std::vector<RowRange> ranges;
  for (int trial = 0; trial < 5000; ++trial) {
    const int64_t rows = rng.uniform_int(0, 3000);
    const int64_t width = rng.uniform_int(1, 5000);
    const int64_t budget =
        rng.bernoulli(0.1) ? 0 : rng.uniform_int(32 * width, 2 * width * (rows + 40));
    FI_ASSERT_OK(decode_row_ranges(ranges, rows, width, budget));
    const auto expected = transcription::decode_chunk_ranges(rows, width, budget);
    ASSERT_EQ(ranges.size(), expected.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      ASSERT_EQ(ranges[i].begin, expected[i].first);
      ASSERT_EQ(ranges[i].end, expected[i].second);
      ASSERT_EQ(ranges[i].begin, i == 0 ? 0 : ranges[i - 1].end);
      if (i > 0) {
        ASSERT_LE(ranges[i].end - ranges[i].begin, ranges[i - 1].end - ranges[i - 1].begin);
      }
      if (budget > 0) {
        ASSERT_LE((ranges[i].end - ranges[i].begin) * width * 2, budget);
      }
    }
    ASSERT_EQ(ranges.back().end, rows);
  }
}

TEST(DecodeRowRanges, EdgesOfTheBudget) {
  std::vector<RowRange> ranges;
  FI_ASSERT_OK(decode_row_ranges(ranges, 100, 10, 100 * 10 * 2));  // exactly fits: one range
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].end, 100);
  FI_ASSERT_OK(decode_row_ranges(ranges, 100, 10, 100 * 10 * 2 - 1));  // one byte short
  ASSERT_EQ(ranges.size(), 2u);  // limit 96 rows; 7 units over 2 ranges: 4 + 3 units
  EXPECT_EQ(ranges[0].end, 64);
  EXPECT_EQ(ranges[1].end, 100);
  FI_ASSERT_OK(decode_row_ranges(ranges, 0, 10, 5));
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(ranges[0].end, 0);
  FI_ASSERT_OK(decode_row_ranges(ranges, 1000, 10, 0));
  ASSERT_EQ(ranges.size(), 1u);
  FI_ASSERT_OK(decode_row_ranges(ranges, 17, 10, 16 * 10 * 2));  // exactly 16 rows per range
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].end, 16);
}

TEST(DecodeRowRanges, RejectsNegativeBudgetsAndBudgetsBelowSixteenRows) {
  std::vector<RowRange> ranges(2);
  EXPECT_TRUE(IsRejected(decode_row_ranges(ranges, 10, 10, -1), StatusCode::kInvalidArgument,
                         {"budget must be nonnegative"}));
  EXPECT_TRUE(ranges.empty());
  EXPECT_TRUE(IsRejected(decode_row_ranges(ranges, 100, 10, 16 * 10 * 2 - 1),
                         StatusCode::kInvalidArgument, {"budget must fit at least 16 bf16 rows"}));
  EXPECT_TRUE(
      IsRejected(decode_row_ranges(ranges, -1, 10, 10), StatusCode::kInvalidArgument, {"rows=-1"}));
}

TEST(DecodeMetadata, RejectsBadInputNamingTheArgument) {
  const std::vector<int64_t> seq_lens = {5, 6}, query_lens = {2, 1};
  std::vector<int32_t> lens(3), rows(3), short_lens(2), native(4);
  FI_EXPECT_OK(decode_flat_lens(lens, rows, seq_lens, query_lens, 2));
  EXPECT_TRUE(IsRejected(decode_flat_lens(lens, rows, seq_lens, query_lens, 1),
                         StatusCode::kInvalidArgument, {"query_lens", "next_n=1"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(short_lens, {}, seq_lens, query_lens, 2),
                         StatusCode::kInvalidArgument, {"row_lens"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(lens, short_lens, seq_lens, query_lens, 2),
                         StatusCode::kInvalidArgument, {"row_to_request"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(lens, rows, std::vector<int64_t>{1, 6}, query_lens, 2),
                         StatusCode::kInvalidArgument, {"query_lens", "seq_lens"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(lens, rows, seq_lens, query_lens, 0),
                         StatusCode::kInvalidArgument, {"next_n=0"}));
  FI_EXPECT_OK(decode_native_lens(native, seq_lens, 2));
  EXPECT_TRUE(
      IsRejected(decode_native_lens(lens, seq_lens, 2), StatusCode::kInvalidArgument, {"lens"}));
  EXPECT_TRUE(IsRejected(decode_native_lens(native, std::vector<int64_t>{-1, 3}, 2),
                         StatusCode::kInvalidArgument, {"seq_lens"}));
  EXPECT_TRUE(IsRejected(decode_native_lens(native, seq_lens, 2, {0}), StatusCode::kInvalidArgument,
                         {"compress_ratio=0"}));
  EXPECT_TRUE(IsRejected(decode_pack_map(lens, native, query_lens, 1), StatusCode::kInvalidArgument,
                         {"query_lens", "max_d=1"}));
  EXPECT_TRUE(IsRejected(decode_pack_map(lens, short_lens, query_lens, 2),
                         StatusCode::kInvalidArgument, {"token_of_packed_row"}));
  EXPECT_TRUE(IsRejected(decode_pack_map(short_lens, native, query_lens, 2),
                         StatusCode::kInvalidArgument, {"packed_row_of_token"}));
}

}  // namespace
}  // namespace fitest
