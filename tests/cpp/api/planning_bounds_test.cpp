// SPDX-License-Identifier: Apache-2.0
// Per-row key bounds of prefill chunks (planning.h): against a transcription of the
// specification, a property test (the keys inside [ks, ke) are exactly the row's visible keys,
// on one rank or under DCP), and bad input.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "planning_transcription.h"
#include "support/compare.h"
#include "support/prefill_cases.h"
#include "support/seed.h"
#include "support/tensors.h"

namespace fitest {
namespace {

ChunkBounds build(const PrefillChunk& chunk, const PrefillBatch& batch,
                  const RowBoundsOptions& options) {
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
    const PrefillBatch batch = random_prefill_batch(rng, 12, 300);
    const RowBoundsOptions options = random_bounds_options(rng);
    for (const PrefillChunk& chunk : plan_prefill_batch(rng, batch, options.compress_ratio)) {
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
    const PrefillBatch batch = random_prefill_batch(rng, 12, 300);
    const RowBoundsOptions options = random_bounds_options(rng);
    const std::vector<PrefillChunk> chunks = plan_prefill_batch(rng, batch, options.compress_ratio);
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
    const PrefillBatch batch = random_prefill_batch(rng, 5, 40);
    const RowBoundsOptions options = random_bounds_options(rng);
    const int R = options.compress_ratio;
    for (const PrefillChunk& chunk : plan_prefill_batch(rng, batch, R)) {
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

// The tensor form on CPU tensors: the span op's bits, for i32 and i64 lengths, with and without
// token_to_seq.
TEST(PrefillRowBoundsOp, CpuTensorsGiveTheHostOpsBounds) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 400; ++trial) {
    const PrefillBatch batch = random_prefill_batch(rng, 12, 300);
    const RowBoundsOptions options = random_bounds_options(rng);
    const DType dtype = rng.bernoulli(0.5) ? DType::kI64 : DType::kI32;
    const HostTensor seq = lengths_tensor(batch.seq_lens, dtype);
    const HostTensor query = lengths_tensor(batch.query_lens, dtype);
    for (const PrefillChunk& chunk : plan_prefill_batch(rng, batch, options.compress_ratio)) {
      const ChunkBounds want = build(chunk, batch, options);
      const auto rows = static_cast<int64_t>(want.ks.size());
      HostTensor ks(DType::kI32, {rows}), ke(DType::kI32, {rows});
      HostTensor token_to_seq(DType::kI32, {static_cast<int64_t>(want.token_to_seq.size())});
      ks.fill(kPoisonIndex);
      ke.fill(kPoisonIndex);
      token_to_seq.fill(kPoisonIndex);
      const bool with_tokens = rng.bernoulli(0.7);
      FI_ASSERT_OK(build_prefill_row_bounds(ks.view(), ke.view(),
                                            with_tokens ? token_to_seq.view() : TensorView{}, chunk,
                                            seq.view(), query.view(), options));
      for (int64_t i = 0; i < rows; ++i) {
        ASSERT_EQ(ks.data<int32_t>()[i], want.ks[i]) << "trial " << trial << " row " << i;
        ASSERT_EQ(ke.data<int32_t>()[i], want.ke[i]) << "trial " << trial << " row " << i;
      }
      for (size_t s = 0; s < want.token_to_seq.size(); ++s) {
        ASSERT_EQ(token_to_seq.data<int32_t>()[s],
                  with_tokens ? want.token_to_seq[s] : kPoisonIndex)
            << "trial " << trial << " key " << s;
      }
    }
  }
}

TEST(PrefillRowBoundsOp, RejectsBadInputNamingTheArgument) {
  const HostTensor seq = lengths_tensor({8, 6}, DType::kI32);
  const HostTensor query = lengths_tensor({2, 3}, DType::kI64);
  const PrefillChunk chunk{0, 2, 0, 5, 0, 5, 14, true};
  HostTensor ks(DType::kI32, {5}), ke(DType::kI32, {5}), token_to_seq(DType::kI32, {14});
  FI_EXPECT_OK(build_prefill_row_bounds(ks.view(), ke.view(), token_to_seq.view(), chunk,
                                        seq.view(), query.view()));
  HostTensor wide(DType::kI64, {5}), short_rows(DType::kI32, {4});
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(wide.view(), ke.view(), {}, chunk, seq.view(), query.view()),
      StatusCode::kInvalidArgument, {"build_prefill_row_bounds", "ks"}));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks.view(), short_rows.view(), {}, chunk, seq.view(), query.view()),
      StatusCode::kInvalidArgument, {"ke"}));
  EXPECT_TRUE(IsRejected(build_prefill_row_bounds(ks.view(), ke.view(), short_rows.view(), chunk,
                                                  seq.view(), query.view()),
                         StatusCode::kInvalidArgument, {"token_to_seq"}));
  const HostTensor three = lengths_tensor({2, 3, 1}, DType::kI32);
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks.view(), ke.view(), {}, chunk, seq.view(), three.view()),
      StatusCode::kInvalidArgument, {"query_lens"}));
  const HostTensor too_many = lengths_tensor({9, 3}, DType::kI32);  // 9 > S_0 = 8
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks.view(), ke.view(), {}, chunk, seq.view(), too_many.view()),
      StatusCode::kInvalidArgument, {"query_lens entry 0"}));
  EXPECT_TRUE(IsRejected(
      build_prefill_row_bounds(ks.view(), ke.view(), {}, chunk, seq.view(), query.view(), {0}),
      StatusCode::kInvalidArgument, {"compress_ratio=0"}));
  // The outputs on another device than the lengths.
  TensorView elsewhere = ks.view();
  elsewhere.device = Device::kCUDA;
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      build_prefill_row_bounds(elsewhere, ke.view(), {}, chunk, seq.view(), query.view()),
      {StatusCode::kInvalidArgument}, {"ks"}));
  // On CUDA lengths only the chunk's own ranges can be checked; they are, before any device call.
  TensorView seq_cuda = seq.view(), query_cuda = query.view(), ks_cuda = ks.view(),
             ke_cuda = ke.view();
  for (TensorView* v : {&seq_cuda, &query_cuda, &ks_cuda, &ke_cuda}) v->device = Device::kCUDA;
  PrefillChunk past_batch = chunk;
  past_batch.request_end = 3;
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks_cuda, ke_cuda, {}, past_batch, seq_cuda, query_cuda),
                 StatusCode::kInvalidArgument, {"chunk requests"}));
  PrefillChunk more_rows = chunk;
  more_rows.query_end = 6;
  EXPECT_TRUE(
      IsRejected(build_prefill_row_bounds(ks_cuda, ke_cuda, {}, more_rows, seq_cuda, query_cuda),
                 StatusCode::kInvalidArgument, {"ks"}));
}

}  // namespace
}  // namespace fitest
