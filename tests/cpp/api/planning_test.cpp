// SPDX-License-Identifier: Apache-2.0
// The prefill chunk planner (planning.h) against a transcription of the specification's
// split_indexer_prefill_chunks over random batches, every budget edge, and bad input.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "planning_transcription.h"
#include "support/compare.h"
#include "support/seed.h"

namespace fitest {
namespace {

std::vector<PrefillChunk> plan(const std::vector<int64_t>& key_lens,
                               const std::vector<int64_t>& query_lens, int64_t workspace_keys,
                               int64_t max_logits_bytes, int64_t min_split_key_len = 0) {
  std::vector<PrefillChunk> chunks;
  const Status status = plan_prefill_chunks(chunks, key_lens, query_lens,
                                            {workspace_keys, max_logits_bytes, min_split_key_len});
  EXPECT_TRUE(status.ok()) << status_text(status);
  return chunks;
}

// The planner's chunks, checked for the fields the transcription does not carry, reduced to it.
std::vector<transcription::Chunk> as_transcribed(const std::vector<PrefillChunk>& chunks,
                                                 const std::vector<int64_t>& query_lens) {
  std::vector<transcription::Chunk> out;
  for (const PrefillChunk& c : chunks) {
    int64_t group_token_begin = 0;
    for (int32_t r = 0; r < c.request_begin; ++r) group_token_begin += query_lens[r];
    EXPECT_EQ(c.token_begin, group_token_begin + c.query_begin);
    EXPECT_EQ(c.token_end, group_token_begin + c.query_end);
    EXPECT_EQ(c.gathers_keys, c.query_begin == 0);
    out.push_back({c.request_begin, c.request_end, c.query_begin, c.query_end, c.num_keys});
  }
  return out;
}

void expect_matches_transcription(const std::vector<int64_t>& key_lens,
                                  const std::vector<int64_t>& query_lens, int64_t workspace_keys,
                                  int64_t max_logits_bytes, int64_t min_split_key_len) {
  const std::vector<PrefillChunk> chunks =
      plan(key_lens, query_lens, workspace_keys, max_logits_bytes, min_split_key_len);
  EXPECT_EQ(as_transcribed(chunks, query_lens),
            transcription::split_prefill_chunks(key_lens, query_lens, workspace_keys,
                                                max_logits_bytes, min_split_key_len))
      << "workspace_keys=" << workspace_keys << " max_logits_bytes=" << max_logits_bytes
      << " min_split_key_len=" << min_split_key_len << " requests=" << key_lens.size();
}

// A length drawn around a budget: zero, small, near the budget, at it, past it.
int64_t length_near(Rng& rng, int64_t budget) {
  switch (rng.uniform_int(0, 5)) {
    case 0:
      return 0;
    case 1:
      return rng.uniform_int(0, 4);
    case 2:
      return rng.uniform_int(0, budget);
    case 3:
      return std::max<int64_t>(0, budget + rng.uniform_int(-2, 2));
    case 4:
      return rng.uniform_int(0, std::max<int64_t>(1, budget / 4));
    default:
      return rng.uniform_int(budget, 3 * budget + 1);
  }
}

TEST(PlanPrefillChunks, MatchesTranscriptionOnRandomBatches) {
  FI_SEEDED_RNG(rng);
  std::printf("PlanPrefillChunks random seed %llu\n", static_cast<unsigned long long>(rng_seed));
  for (int batch = 0; batch < 5000; ++batch) {
    const int64_t workspace_keys = rng.uniform_int(1, 300);
    const int64_t max_logits_bytes =
        rng.bernoulli(0.2) ? rng.uniform_int(4, 64) : rng.uniform_int(4, 4 * 20000);
    const int64_t requests = rng.uniform_int(0, 40);
    const int64_t min_split = rng.bernoulli(0.3) ? rng.uniform_int(0, 120) : 0;
    std::vector<int64_t> key_lens(requests), query_lens(requests);
    for (int64_t r = 0; r < requests; ++r) {
      key_lens[r] = length_near(rng, workspace_keys);
      query_lens[r] = length_near(rng, max_logits_bytes / 4 / std::max<int64_t>(1, key_lens[r]));
    }
    expect_matches_transcription(key_lens, query_lens, workspace_keys, max_logits_bytes, min_split);
    if (HasFailure()) return;
  }
}

TEST(PlanPrefillChunks, CoversEveryTokenOfRequestsWithKeysOnceInOrder) {
  FI_SEEDED_RNG(rng);
  for (int batch = 0; batch < 1000; ++batch) {
    const int64_t requests = rng.uniform_int(0, 30);
    std::vector<int64_t> key_lens(requests), query_lens(requests);
    for (int64_t r = 0; r < requests; ++r) {
      key_lens[r] = rng.bernoulli(0.2) ? 0 : rng.uniform_int(0, 200);
      query_lens[r] = rng.uniform_int(0, 200);
    }
    const int64_t workspace_keys = rng.uniform_int(1, 400);
    const int64_t max_logits_bytes = rng.uniform_int(4, 4 * 40000);
    const std::vector<PrefillChunk> chunks =
        plan(key_lens, query_lens, workspace_keys, max_logits_bytes);
    std::vector<int> covered;  // per prefill token: how many chunks hold it
    for (int64_t r = 0; r < requests; ++r) covered.insert(covered.end(), query_lens[r], 0);
    int64_t previous_end = 0;
    for (const PrefillChunk& c : chunks) {
      ASSERT_GE(c.token_begin, previous_end);
      ASSERT_LT(c.query_begin, c.query_end);
      ASSERT_GT(c.num_keys, 0);
      for (int64_t t = c.token_begin; t < c.token_end; ++t) ++covered[t];
      previous_end = c.token_end;
    }
    int64_t token = 0;
    for (int64_t r = 0; r < requests; ++r) {
      for (int64_t i = 0; i < query_lens[r]; ++i, ++token) {
        // A request without keys may ride in a group with keys (its rows see nothing).
        ASSERT_LE(covered[token], 1) << "request " << r;
        if (key_lens[r] > 0) {
          ASSERT_EQ(covered[token], 1) << "request " << r;
        }
      }
    }
  }
}

TEST(PlanPrefillChunks, EmptyBatchPlansNoChunk) { EXPECT_TRUE(plan({}, {}, 10, 400).empty()); }

TEST(PlanPrefillChunks, KeysExactlyAtWorkspaceBudgetShareOneChunk) {
  const auto chunks = plan({4, 4}, {1, 1}, 8, 1 << 20);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].request_end, 2);
  EXPECT_EQ(chunks[0].num_keys, 8);
}

TEST(PlanPrefillChunks, OneKeyOverWorkspaceBudgetStartsANewChunk) {
  const auto chunks = plan({4, 5}, {1, 1}, 8, 1 << 20);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].request_end, 1);
  EXPECT_EQ(chunks[1].request_begin, 1);
  EXPECT_EQ(chunks[1].token_begin, 1);
}

TEST(PlanPrefillChunks, LogitsExactlyAtBudgetShareOneChunk) {
  // (2 + 3) queries x (4 + 6) keys x 4 bytes = 200 bytes.
  const auto chunks = plan({4, 6}, {2, 3}, 100, 200);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].query_end, 5);
  const auto over = plan({4, 6}, {2, 3}, 100, 199);
  ASSERT_EQ(over.size(), 2u);
  EXPECT_EQ(over[0].request_end, 1);
}

TEST(PlanPrefillChunks, RequestLongerThanWorkspaceIsTakenAlone) {
  const auto chunks = plan({3, 50, 3}, {1, 1, 1}, 10, 1 << 20);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[1].request_begin, 1);
  EXPECT_EQ(chunks[1].request_end, 2);
  EXPECT_EQ(chunks[1].num_keys, 50);
}

TEST(PlanPrefillChunks, RequestOverLogitsBudgetSplitsIntoSubChunksSharingOneGather) {
  // 10 keys, 7 queries, room for 30 logits: sub-chunks of 3 query rows.
  const auto chunks = plan({10}, {7}, 100, 4 * 30);
  ASSERT_EQ(chunks.size(), 3u);
  const int64_t bounds[3][2] = {{0, 3}, {3, 6}, {6, 7}};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(chunks[i].query_begin, bounds[i][0]);
    EXPECT_EQ(chunks[i].query_end, bounds[i][1]);
    EXPECT_EQ(chunks[i].gathers_keys, i == 0);
    EXPECT_EQ(chunks[i].num_keys, 10);
  }
}

TEST(PlanPrefillChunks, KeysPastLogitsBudgetStillGetOneQueryRowPerSubChunk) {
  const auto chunks = plan({50}, {3}, 100, 4 * 10);
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[2].query_begin, 2);
  EXPECT_EQ(chunks[2].query_end, 3);
}

TEST(PlanPrefillChunks, ChunksWithoutKeysAreDroppedAndTheirTokensSkipped) {
  // Request 0 has no keys, request 1 is alone past the workspace, request 2 has no queries.
  const auto chunks = plan({0, 20, 0}, {5, 2, 0}, 10, 1 << 20);
  ASSERT_EQ(chunks.size(), 1u);
  EXPECT_EQ(chunks[0].request_begin, 1);
  EXPECT_EQ(chunks[0].token_begin, 5);
  EXPECT_EQ(chunks[0].token_end, 7);
  EXPECT_TRUE(plan({0, 0}, {3, 4}, 10, 400).empty());
  EXPECT_TRUE(plan({5}, {0}, 10, 400).empty());
}

TEST(PlanPrefillChunks, MinSplitKeyLenGroupsAsIfEveryRequestHadTheSparseWidth) {
  // Without the clamp all three fit one chunk; clamped to 4 keys each, two fit 8 keys.
  EXPECT_EQ(plan({1, 1, 1}, {1, 1, 1}, 8, 1 << 20).size(), 1u);
  const auto chunks = plan({1, 1, 1}, {1, 1, 1}, 8, 1 << 20, 4);
  ASSERT_EQ(chunks.size(), 2u);
  EXPECT_EQ(chunks[0].request_end, 2);
  EXPECT_EQ(chunks[0].num_keys, 2);  // the real key count
  // The clamp also sizes the query sub-chunks: 40 logits / 10 sized keys = 4 rows.
  const auto sub = plan({2}, {9}, 100, 4 * 40, 10);
  ASSERT_EQ(sub.size(), 3u);
  EXPECT_EQ(sub[0].query_end, 4);
}

TEST(PlanPrefillChunks, RejectsBadInputNamingTheArgument) {
  std::vector<PrefillChunk> chunks(3);
  const std::vector<int64_t> one = {1};
  const std::vector<int64_t> negative = {-1};
  const std::vector<int64_t> two = {1, 1};
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, negative, one, {10, 400}),
                         StatusCode::kInvalidArgument, {"key_lens", "-1"}));
  EXPECT_TRUE(chunks.empty());
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, negative, {10, 400}),
                         StatusCode::kInvalidArgument, {"query_lens", "-1"}));
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, two, {10, 400}),
                         StatusCode::kInvalidArgument, {"query_lens"}));
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, one, {0, 400}),
                         StatusCode::kInvalidArgument, {"workspace_keys=0"}));
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, one, {10, 0}),
                         StatusCode::kInvalidArgument, {"max_logits_bytes=0"}));
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, one, {10, 3}),
                         StatusCode::kInvalidArgument, {"max_logits_bytes=3"}));
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, one, one, {10, 400, -2}),
                         StatusCode::kInvalidArgument, {"min_split_key_len=-2"}));
  const std::vector<int64_t> huge = {int64_t{1} << 40};
  EXPECT_TRUE(IsRejected(plan_prefill_chunks(chunks, huge, one, {10, 400}),
                         StatusCode::kInvalidArgument, {"key_lens"}));
}

}  // namespace
}  // namespace fitest
