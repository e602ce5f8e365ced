// SPDX-License-Identifier: Apache-2.0
// Per-row key bounds of prefill chunks (planning.h): against a transcription of the
// specification, a property test (the keys inside [ks, ke) are exactly the row's visible keys,
// on one rank or under DCP), and bad input.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "planning_transcription.h"
#include "support/compare.h"
#include "support/seed.h"

namespace fitest {
namespace {

struct Batch {
  std::vector<int64_t> seq_lens, query_lens;
};

Batch random_batch(Rng& rng, int64_t max_requests, int64_t max_len) {
  Batch batch;
  const int64_t requests = rng.uniform_int(1, max_requests);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t seq_len = rng.uniform_int(0, max_len);
    batch.seq_lens.push_back(seq_len);
    batch.query_lens.push_back(rng.bernoulli(0.3) ? seq_len : rng.uniform_int(0, seq_len));
  }
  return batch;
}

RowBoundsOptions random_options(Rng& rng) {
  RowBoundsOptions options;
  options.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 1, 2, 4, 128}));
  if (rng.bernoulli(0.5)) {
    options.dcp = {static_cast<int>(rng.uniform_int(1, 4)),
                   static_cast<int>(rng.uniform_int(1, 3))};
    options.dcp_rank = static_cast<int>(rng.uniform_int(0, options.dcp.ranks - 1));
  }
  return options;
}

// Plans the batch (the planner sees the compressed lengths) with a random budget.
std::vector<PrefillChunk> plan_batch(Rng& rng, const Batch& batch, int compress_ratio) {
  std::vector<int64_t> key_lens;
  for (int64_t s : batch.seq_lens) key_lens.push_back(s / compress_ratio);
  std::vector<PrefillChunk> chunks;
  const Status status = plan_prefill_chunks(
      chunks, key_lens, batch.query_lens,
      {rng.uniform_int(1, 200), rng.uniform_int(4, 4 * 4000), rng.uniform_int(0, 3)});
  EXPECT_TRUE(status.ok()) << status_text(status);
  return chunks;
}

struct ChunkBounds {
  std::vector<int32_t> ks, ke, token_to_seq;
};

ChunkBounds build(const PrefillChunk& chunk, const Batch& batch, const RowBoundsOptions& options) {
  ChunkBounds out;
  const int64_t rows = chunk.query_end - chunk.query_begin;
  const int64_t keys = chunk_workspace_keys(chunk, batch.seq_lens, options);
  EXPECT_GE(keys, 0);
  out.ks.assign(rows, -7);
  out.ke.assign(rows, -7);
  out.token_to_seq.assign(keys, -7);
  const Status status = build_prefill_row_bounds(out.ks, out.ke, out.token_to_seq, chunk,
                                                 batch.seq_lens, batch.query_lens, options);
  EXPECT_TRUE(status.ok()) << status_text(status);
  return out;
}

TEST(PrefillRowBounds, MatchTranscriptionOnRandomChunks) {
  FI_SEEDED_RNG(rng);
  std::printf("PrefillRowBounds random seed %llu\n", static_cast<unsigned long long>(rng_seed));
  for (int trial = 0; trial < 2000; ++trial) {
    const Batch batch = random_batch(rng, 12, 300);
    const RowBoundsOptions options = random_options(rng);
    for (const PrefillChunk& chunk : plan_batch(rng, batch, options.compress_ratio)) {
      const ChunkBounds got = build(chunk, batch, options);
      const transcription::Bounds expected = transcription::row_bounds(
          batch.seq_lens, batch.query_lens, chunk.request_begin, chunk.request_end,
          chunk.query_begin, chunk.query_end, options.compress_ratio, options.dcp.ranks,
          options.dcp.interleave, options.dcp_rank);
      ASSERT_EQ(got.ks, expected.ks) << "trial " << trial;
      ASSERT_EQ(got.ke, expected.ke) << "trial " << trial;
      ASSERT_EQ(got.token_to_seq, expected.token_to_seq) << "trial " << trial;
    }
  }
}

TEST(PrefillStepRowBounds, AreEveryChunksBoundsInChunkOrder) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 500; ++trial) {
    const Batch batch = random_batch(rng, 12, 300);
    const RowBoundsOptions options = random_options(rng);
    const std::vector<PrefillChunk> chunks = plan_batch(rng, batch, options.compress_ratio);
    std::vector<int32_t> want_ks, want_ke;
    for (const PrefillChunk& chunk : chunks) {
      const ChunkBounds one = build(chunk, batch, options);
      want_ks.insert(want_ks.end(), one.ks.begin(), one.ks.end());
      want_ke.insert(want_ke.end(), one.ke.begin(), one.ke.end());
    }
    std::vector<int32_t> ks(want_ks.size(), -7), ke(want_ke.size(), -7);
    FI_ASSERT_OK(
        build_prefill_step_row_bounds(ks, ke, chunks, batch.seq_lens, batch.query_lens, options));
    ASSERT_EQ(ks, want_ks) << "trial " << trial;
    ASSERT_EQ(ke, want_ke) << "trial " << trial;
    if (!chunks.empty()) {
      std::vector<int32_t> short_ks(ks.size() + 1);
      EXPECT_TRUE(IsRejected(build_prefill_step_row_bounds(short_ks, ke, chunks, batch.seq_lens,
                                                           batch.query_lens, options),
                             StatusCode::kInvalidArgument, {"ks"}));
      std::vector<PrefillChunk> wrong = chunks;
      wrong.back().num_keys += 1;
      EXPECT_TRUE(IsRejected(
          build_prefill_step_row_bounds(ks, ke, wrong, batch.seq_lens, batch.query_lens, options),
          StatusCode::kInvalidArgument, {"num_keys"}));
    }
  }
}

// The workspace a rank packs for a chunk, key by key: (request, compressed key) in request order,
// then in key order, only the keys the rank owns.
struct WorkspaceKey {
  int64_t request, key;
};

TEST(PrefillRowBounds, KeysWithinBoundsAreExactlyTheVisibleKeys) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 1500; ++trial) {
    const Batch batch = random_batch(rng, 5, 40);
    const RowBoundsOptions options = random_options(rng);
    const int R = options.compress_ratio;
    for (const PrefillChunk& chunk : plan_batch(rng, batch, R)) {
      std::vector<WorkspaceKey> workspace;
      for (int64_t r = chunk.request_begin; r < chunk.request_end; ++r) {
        for (int64_t j = 0; j < batch.seq_lens[r] / R; ++j) {
          if (dcp_owner(j, options.dcp) == options.dcp_rank) workspace.push_back({r, j});
        }
      }
      const ChunkBounds got = build(chunk, batch, options);
      ASSERT_EQ(got.token_to_seq.size(), workspace.size());
      for (size_t s = 0; s < workspace.size(); ++s) {
        ASSERT_EQ(got.token_to_seq[s], workspace[s].request - chunk.request_begin);
      }
      int64_t group_query = 0;
      for (int64_t r = chunk.request_begin; r < chunk.request_end; ++r) {
        for (int64_t i = 0; i < batch.query_lens[r]; ++i, ++group_query) {
          if (group_query < chunk.query_begin || group_query >= chunk.query_end) continue;
          const int64_t row = group_query - chunk.query_begin;
          const int64_t position = batch.seq_lens[r] - batch.query_lens[r] + i;
          ASSERT_LE(got.ks[row], got.ke[row]);
          for (size_t s = 0; s < workspace.size(); ++s) {
            const bool visible =
                workspace[s].request == r && workspace[s].key * R + R - 1 <= position;
            const bool in_bounds =
                got.ks[row] <= static_cast<int64_t>(s) && static_cast<int64_t>(s) < got.ke[row];
            ASSERT_EQ(in_bounds, visible) << "trial " << trial << " request " << r << " query " << i
                                          << " workspace key " << s;
          }
        }
      }
    }
  }
}

TEST(PrefillRowBounds, FirstRowsOfACompressedRequestSeeNoKeys) {
  // R = 4, one request of 10 tokens all queried: positions 0..2 see 0 keys, 3..6 one, 7..9 two.
  const std::vector<int64_t> seq_lens = {10}, query_lens = {10};
  const PrefillChunk chunk{0, 1, 0, 10, 0, 10, 2, true};
  std::vector<int32_t> ks(10), ke(10), token_to_seq(2);
  FI_ASSERT_OK(build_prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, query_lens, {4}));
  EXPECT_EQ(ke, (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(ks, std::vector<int32_t>(10, 0));
}

TEST(PrefillRowBounds, RejectsBadInputNamingTheArgument) {
  const std::vector<int64_t> seq_lens = {8, 6}, query_lens = {2, 3};
  const PrefillChunk chunk{0, 2, 0, 5, 0, 5, 14, true};
  std::vector<int32_t> ks(5), ke(5), token_to_seq(14), short_rows(4);
  FI_EXPECT_OK(build_prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, query_lens));
  FI_EXPECT_OK(build_prefill_row_bounds(ks, ke, {}, chunk, seq_lens, query_lens));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(short_rows, ke, token_to_seq, chunk, seq_lens, query_lens),
      StatusCode::kInvalidArgument, {"ks"}));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks, short_rows, token_to_seq, chunk, seq_lens, query_lens),
      StatusCode::kInvalidArgument, {"ke"}));
  EXPECT_TRUE(IsRejected(build_prefill_row_bounds(ks, ke, short_rows, chunk, seq_lens, query_lens),
                         StatusCode::kInvalidArgument, {"token_to_seq"}));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, std::vector<int64_t>{9, 3}),
      StatusCode::kInvalidArgument, {"query_lens"}));
  EXPECT_TRUE(IsRejected(build_prefill_row_bounds(ks, ke, token_to_seq, chunk,
                                                  std::vector<int64_t>{8, -6}, query_lens),
                         StatusCode::kInvalidArgument, {"seq_lens"}));
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, query_lens, {0}),
                 StatusCode::kInvalidArgument, {"compress_ratio=0"}));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, query_lens, {1, {2, 1}, 2}),
      StatusCode::kInvalidArgument, {"dcp_rank=2"}));
  PrefillChunk wrong_keys = chunk;
  wrong_keys.num_keys = 13;
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks, ke, token_to_seq, wrong_keys, seq_lens, query_lens),
                 StatusCode::kInvalidArgument, {"num_keys=13"}));
  PrefillChunk past_batch = chunk;
  past_batch.request_end = 3;
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks, ke, token_to_seq, past_batch, seq_lens, query_lens),
                 StatusCode::kInvalidArgument, {"chunk requests"}));
  EXPECT_EQ(chunk_workspace_keys(past_batch, seq_lens), -1);
  PrefillChunk past_rows = chunk;
  past_rows.query_end = 6;
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks, ke, token_to_seq, past_rows, seq_lens, query_lens),
                 StatusCode::kInvalidArgument, {"chunk query rows"}));
}

}  // namespace
}  // namespace fitest
