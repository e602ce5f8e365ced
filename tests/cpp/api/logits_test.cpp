// SPDX-License-Identifier: Apache-2.0
// Scoring ops on CPU tensors (logits.h): mqa_logits and paged_mqa_logits against the reference.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

// Every supported (format, H, D).
const OperandCase kCases[] = {
    {KFormat::kFP8, 32, 128},  {KFormat::kFP8, 64, 128},   {KFormat::kFP8, 32, 64},
    {KFormat::kFP8, 64, 64},   {KFormat::kMXFP4, 32, 128}, {KFormat::kMXFP4, 64, 128},
    {KFormat::kMXFP4, 32, 64}, {KFormat::kMXFP4, 64, 64},
};

// ----------------------------------------------------------------------------- mqa_logits

TEST(MqaLogits, MatchesReferenceWithinDerivedTolerance) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kCases) {
    SCOPED_TRACE(describe(c));
    const int64_t M = rng.uniform_int(8, 16);
    const int64_t N = rng.uniform_int(200, 500);
    PrefillRun run = prefill_run(rng, c, M, N);
    PrefillProblem& p = run.problem;
    // Logits wider than N (columns >= N are outside every row) with padded rows.
    const int64_t width = N + rng.uniform_int(0, 9);
    HostTensor logits = poisoned_logits(M, width, width + rng.uniform_int(1, 40));
    FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                            p.ke.view(), LogitsOptions{true}));
    EXPECT_TRUE(LogitsMatch(logits, run.starts, run.ends, run.score, c.head_dim, c.heads, true));
  }
}

TEST(MqaLogits, LeavesColumnsOutsideTheRangeUntouchedWhenNotClean) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : {kCases[0], kCases[5]}) {
    SCOPED_TRACE(describe(c));
    PrefillRun run = prefill_run(rng, c, 10, 300);
    PrefillProblem& p = run.problem;
    HostTensor logits = poisoned_logits(10, 300, 333);
    FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                            p.ke.view(), LogitsOptions{false}));
    EXPECT_TRUE(LogitsMatch(logits, run.starts, run.ends, run.score, c.head_dim, c.heads, false));
  }
}

TEST(MqaLogits, IsBitIdenticalAcrossThreadCountsAndRuns) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : {kCases[1], kCases[6]}) {
    SCOPED_TRACE(describe(c));
    PrefillProblem p = make_prefill_problem(rng, c.format, 21, 700, c.heads, c.head_dim);
    std::vector<uint32_t> first;
    for (int threads : {1, 2, 3, 1}) {
      HostTensor logits = poisoned_logits(21, 700);
      RunOptions options;
      options.cpu_threads = threads;
      FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              p.ks.view(), p.ke.view(), LogitsOptions{true}, options));
      std::vector<uint32_t> bits(logits.data<uint32_t>(), logits.data<uint32_t>() + 21 * 700);
      if (first.empty()) {
        first = bits;
      } else {
        ASSERT_EQ(bits, first) << "logits with cpu_threads=" << threads
                               << " differ from cpu_threads=1";
      }
    }
  }
}

// ----------------------------------------------------------------------------- paged

// Rows are scored in blocks of four sharing one transposed key tile; a row's logits must not
// depend on its block. Row 4 (a block of its own, as the last row of a chunk or a decode row at
// next_n = 1) repeats row 0 (in the first block), with adversarial keys: ties, zero keys, NaN
// codes, and a key count that ends mid-tile.
TEST(MqaLogits, ALoneRowGetsTheSameBitsAsTheSameRowInABlock) {
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (int head_dim : {64, 128}) {
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " D=" << head_dim);
      const int64_t keys = 700;
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 5, keys, heads, head_dim);
      add_ties(rng, p.keys, {KFormat::kFP8, heads, head_dim}, keys);
      p.keys.values.bytes()[3 * head_dim + 1] = 0x7F;  // a NaN code: key 3 scores NaN
      p.keys.values.bytes()[9 * head_dim] = 0xFF;      // and -NaN: key 9 too
      const int64_t q_row = static_cast<int64_t>(heads) * head_dim;
      std::memcpy(p.q.values.bytes() + 4 * q_row, p.q.values.bytes(), q_row);
      std::memcpy(p.weights.data<float>() + 4 * heads, p.weights.data<float>(),
                  sizeof(float) * heads);
      p.ks.data<int32_t>()[0] = p.ks.data<int32_t>()[4] = 0;
      p.ke.data<int32_t>()[0] = p.ke.data<int32_t>()[4] = static_cast<int32_t>(keys);
      for (int threads : {1, 2}) {
        RunOptions options;
        options.cpu_threads = threads;
        HostTensor logits = poisoned_logits(5, keys);
        FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                p.ks.view(), p.ke.view(), {}, options));
        for (int64_t s = 0; s < keys; ++s) {
          ASSERT_EQ(float_bits(logits.at<float>({4, s})), float_bits(logits.at<float>({0, s})))
              << "key " << s << ", threads " << threads;
        }
      }
    }
  }
}

TEST(PagedMqaLogits, MatchesReferenceWithinDerivedTolerance) {
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (const OperandCase& c : kCases) {
    for (bool two_dim : {false, true}) {
      DecodeConfig config;
      config.format = c.format;
      config.heads = c.heads;
      config.head_dim = c.head_dim;
      config.batch = 3;
      config.next_n = 1 + index % 4;
      config.two_dim_lens = two_dim;
      config.page_size = std::vector<int>{32, 64, 128}[index % 3];
      config.max_len = 260;
      config.stride_pad_bytes = 4 * rng.uniform_int(0, 20);
      ++index;
      SCOPED_TRACE(describe(config));
      PagedRun run = paged_run(rng, config);
      DecodeProblem& p = run.problem;
      HostTensor logits = poisoned_logits(p.rows(), p.width, p.width + rng.uniform_int(1, 30));
      FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(),
                                    LogitsOptions{true}));
      EXPECT_TRUE(LogitsMatch(logits, run.starts, p.ends, run.score, c.head_dim, c.heads, true));
    }
  }
}

TEST(PagedMqaLogits, LeavesColumnsBeyondTheContextUntouchedWhenNotClean) {
  FI_SEEDED_RNG(rng);
  for (bool two_dim : {false, true}) {
    DecodeConfig config;
    config.format = two_dim ? KFormat::kMXFP4 : KFormat::kFP8;
    config.next_n = 2;
    config.two_dim_lens = two_dim;
    SCOPED_TRACE(describe(config));
    PagedRun run = paged_run(rng, config);
    DecodeProblem& p = run.problem;
    HostTensor logits = poisoned_logits(p.rows(), p.width, p.width + 3);
    FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                  p.context_lens.view(), p.block_table.view(),
                                  LogitsOptions{false}));
    EXPECT_TRUE(
        LogitsMatch(logits, run.starts, p.ends, run.score, config.head_dim, config.heads, false));
  }
}

TEST(PagedMqaLogits, OneDimLengthsShorterThanNextNGiveEmptyRows) {
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.next_n = 4;
  config.batch = 3;
  config.max_len = 100;
  SCOPED_TRACE(describe(config));
  // Request 0 has 1 key: rows (0,0..2) see nothing, row (0,3) sees 1 key; request 1 has none.
  PagedRun run = paged_run(rng, config, {1, 0});
  DecodeProblem& p = run.problem;
  ASSERT_EQ(p.ends[0], 0);
  ASSERT_EQ(p.ends[3], 1);
  HostTensor logits = poisoned_logits(p.rows(), p.width);
  FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                p.context_lens.view(), p.block_table.view(), LogitsOptions{true}));
  EXPECT_TRUE(
      LogitsMatch(logits, run.starts, p.ends, run.score, config.head_dim, config.heads, true));
}

TEST(PagedMqaLogits, ReadsOnlyBlockTableEntriesOfVisiblePages) {
  // The header defines the key at position s as page block_table[b, s / page_size] for
  // visible s only; entries past a request's last visible page are padding (engines leave
  // garbage there) and must be neither read nor rejected.
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.format = KFormat::kMXFP4;
  config.next_n = 2;
  config.page_size = 32;
  SCOPED_TRACE(describe(config));
  PagedRun run = paged_run(rng, config);
  DecodeProblem& p = run.problem;
  for (int b = 0; b < config.batch; ++b) {
    for (int64_t col = ceil_div(p.stored[b], config.page_size); col < p.block_table.size(1);
         ++col) {
      p.block_table.at<int32_t>({b, col}) =
          (col % 2 == 0) ? -1 : static_cast<int32_t>(p.cache.cache().num_pages + 1000);
    }
  }
  HostTensor logits = poisoned_logits(p.rows(), p.width);
  FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                p.context_lens.view(), p.block_table.view(), LogitsOptions{true}));
  EXPECT_TRUE(
      LogitsMatch(logits, run.starts, p.ends, run.score, config.head_dim, config.heads, true));
}

TEST(PagedMqaLogits, IsBitIdenticalAcrossThreadCountsAndRuns) {
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.heads = 64;
  config.next_n = 3;
  config.batch = 5;
  config.max_len = 600;
  SCOPED_TRACE(describe(config));
  DecodeProblem p = make_decode_problem(rng, config);
  std::vector<uint32_t> first;
  for (int threads : {1, 2, 4, 1}) {
    HostTensor logits = poisoned_logits(p.rows(), p.width);
    RunOptions options;
    options.cpu_threads = threads;
    FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                  p.context_lens.view(), p.block_table.view(), LogitsOptions{true},
                                  options));
    std::vector<uint32_t> bits(logits.data<uint32_t>(),
                               logits.data<uint32_t>() + p.rows() * p.width);
    if (first.empty()) {
      first = bits;
    } else {
      ASSERT_EQ(bits, first) << "logits with cpu_threads=" << threads
                             << " differ from cpu_threads=1";
    }
  }
}

TEST(PagedMqaLogits, NegativeContextLengthIsRejectedOrEmpty) {
  // logits.h does not define a negative context length; it must either be rejected naming
  // context_lens or count as no visible key (never read anything).
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.two_dim_lens = true;
  config.next_n = 2;
  DecodeProblem p = make_decode_problem(rng, config);
  p.context_lens.data<int32_t>()[0] = -5;
  p.ends[0] = 0;
  HostTensor logits = poisoned_logits(p.rows(), p.width);
  const Status status =
      paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                       p.context_lens.view(), p.block_table.view(), LogitsOptions{true});
  if (status.ok()) {
    for (int64_t s = 0; s < p.width; ++s) {
      EXPECT_EQ(float_bits(logits.at<float>({0, s})), float_bits(-kInf)) << "column " << s;
    }
  } else {
    EXPECT_TRUE(IsRejected(status, StatusCode::kInvalidArgument, {"context_lens"}));
  }
}

}  // namespace
}  // namespace fitest
