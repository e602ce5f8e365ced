// SPDX-License-Identifier: Apache-2.0
// The fused indexer on CPU tensors (indexer.h): indexer_prefill == topk_per_row(mqa_logits) and
// indexer_decode == topk_per_row(paged_mqa_logits), exactly, on any thread count and workspace.
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

// A caller workspace of exactly indexer_cpu_workspace_size(k, threads) poisoned bytes.
struct Workspace {
  std::vector<uint8_t> bytes;
  RunOptions options(int threads) {
    RunOptions o;
    o.cpu_threads = threads;
    o.workspace = bytes.empty() ? nullptr : bytes.data();
    o.workspace_bytes = bytes.size();
    return o;
  }
};
Workspace workspace_for(int k, int threads) {
  return Workspace{std::vector<uint8_t>(indexer_cpu_workspace_size(k, threads), kPoisonByte)};
}

// ----------------------------------------------------------------------------- prefill

TEST(IndexerPrefill, EqualsTopKOfMqaLogits) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    SCOPED_TRACE(describe(c));
    const int64_t M = rng.uniform_int(12, 20);
    const int64_t N = rng.uniform_int(400, 900);
    const int k = static_cast<int>(rng.pick(std::vector<int64_t>{16, 100, 256}));
    SCOPED_TRACE(::testing::Message() << "M=" << M << " N=" << N << " k=" << k);
    PrefillProblem p = make_prefill_problem(rng, c.format, M, N, c.heads, c.head_dim);
    add_ties(rng, p.keys, c, N);
    HostTensor logits = poisoned_logits(M, N);
    FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                            p.ke.view(), LogitsOptions{false}));
    for (bool sorted : {false, true}) {
      HostTensor expected = poisoned_topk_output(M, k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::prefill(p.ks.view(), p.ke.view()), k,
                                TopKOptions{sorted}));
      std::vector<int32_t> first_run;
      for (int threads : {1, 3}) {
        SCOPED_TRACE(::testing::Message()
                     << (sorted ? "sorted" : "unsorted") << " cpu_threads=" << threads
                     << (threads == 3 ? " caller workspace" : " own workspace"));
        Workspace workspace = threads == 3 ? workspace_for(k, threads) : Workspace{};
        HostTensor out = poisoned_topk_output(M, k + 3, k + 7);
        FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                     p.ks.view(), p.ke.view(), k, TopKOptions{sorted},
                                     workspace.options(threads)));
        EXPECT_TRUE(SameTopK(out, expected, k, sorted));
        std::vector<int32_t> all;
        for (int64_t r = 0; r < M; ++r) {
          const std::vector<int32_t> row = topk_row(out, r, k);
          all.insert(all.end(), row.begin(), row.end());
        }
        if (first_run.empty()) {
          first_run = all;
        } else {
          EXPECT_EQ(all, first_run) << "the output depends on the thread count";
        }
      }
    }
  }
}

TEST(IndexerPrefill, HeavyTiesAndShortRowsEqualTopKOfMqaLogits) {
  // Keys drawn from a handful of distinct rows: most scores tie, so the k-th value is shared.
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : {kOperandCases[0], kOperandCases[2]}) {
    SCOPED_TRACE(describe(c));
    const int64_t M = 10;
    const int64_t N = 600;
    const int k = 64;
    PrefillProblem p = make_prefill_problem(rng, c.format, M, N, c.heads, c.head_dim);
    for (int64_t s = 6; s < N; ++s) copy_key_row(p.keys, c.format, c.head_dim, s % 6, s);
    const int32_t starts[] = {0, 600, 0, 3, 1, 11, 100, 7, 599, 200};
    const int32_t ends[] = {0,  600, 600, 4,   64,
                            76, 165, 400, 600, 264};  // lengths 0,0,600,1,63,65,65,393,1,64
    for (int64_t t = 0; t < M; ++t) {
      p.ks.data<int32_t>()[t] = starts[t];
      p.ke.data<int32_t>()[t] = ends[t];
    }
    HostTensor logits = poisoned_logits(M, N);
    FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                            p.ke.view()));
    for (bool sorted : {false, true}) {
      SCOPED_TRACE(sorted ? "sorted" : "unsorted");
      HostTensor expected = poisoned_topk_output(M, k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::prefill(p.ks.view(), p.ke.view()), k,
                                TopKOptions{sorted}));
      HostTensor out = poisoned_topk_output(M, k);
      FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                   p.ks.view(), p.ke.view(), k, TopKOptions{sorted}));
      EXPECT_TRUE(SameTopK(out, expected, k, sorted));
      // And both agree with the reference selection over the same logits.
      HostTensor reference_out(DType::kI32, {M, k});
      reference::topk_per_row(reference_out.view(), logits.view(),
                              RowRanges::prefill(p.ks.view(), p.ke.view()), k);
      EXPECT_TRUE(SameTopK(out, reference_out, k, sorted));
    }
  }
}

// ----------------------------------------------------------------------------- decode

TEST(IndexerDecode, EqualsTopKOfPagedMqaLogits) {
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (const OperandCase& c : kOperandCases) {
    for (bool two_dim : {false, true}) {
      DecodeConfig config;
      config.format = c.format;
      config.heads = c.heads;
      config.head_dim = c.head_dim;
      config.batch = 4;
      config.next_n = 1 + index % 4;
      config.two_dim_lens = two_dim;
      config.page_size = std::vector<int>{64, 32, 128}[index % 3];
      config.max_len = 500;
      config.stride_pad_bytes = 4 * rng.uniform_int(0, 10);
      ++index;
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{32, 100, 300}));
      SCOPED_TRACE(::testing::Message()
                   << describe(c) << " next_n=" << config.next_n
                   << " page_size=" << config.page_size
                   << (two_dim ? " context_lens [B, next_n]" : " context_lens [B]") << " k=" << k);
      DecodeProblem p =
          make_decode_problem(rng, config, {static_cast<int32_t>(config.next_n - 1), 3});
      // Duplicate keys inside each request.
      for (int b = 0; b < config.batch; ++b) {
        for (int64_t i = 0; i < p.stored[b] / 4; ++i) {
          const int64_t from = rng.uniform_int(0, p.stored[b] - 1);
          const int64_t to = rng.uniform_int(0, p.stored[b] - 1);
          copy_key_row(p.request_keys[b], c.format, c.head_dim, from, to);
          const int64_t page = p.block_table.at<int32_t>({b, to / config.page_size});
          p.cache.write_slot(page * config.page_size + to % config.page_size, p.request_keys[b],
                             to);
        }
      }
      HostTensor logits = poisoned_logits(p.rows(), p.width);
      FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(),
                                    LogitsOptions{false}));
      // Per-row visible lengths (the header's definition) for the selection.
      std::vector<int32_t> row_lengths(p.ends.begin(), p.ends.end());
      HostTensor lengths = i32_tensor(row_lengths);
      for (bool sorted : {false, true}) {
        HostTensor expected = poisoned_topk_output(p.rows(), k);
        FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(), RowRanges::decode(lengths.view()),
                                  k, TopKOptions{sorted}));
        std::vector<int32_t> first_run;
        for (int threads : {1, 3}) {
          SCOPED_TRACE(::testing::Message()
                       << (sorted ? "sorted" : "unsorted") << " cpu_threads=" << threads);
          Workspace workspace = threads == 3 ? workspace_for(k, threads) : Workspace{};
          HostTensor out = poisoned_topk_output(p.rows(), k + 1, k + 4);
          FI_ASSERT_OK(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                      p.context_lens.view(), p.block_table.view(), k,
                                      TopKOptions{sorted}, workspace.options(threads)));
          EXPECT_TRUE(SameTopK(out, expected, k, sorted));
          std::vector<int32_t> all;
          for (int64_t r = 0; r < p.rows(); ++r) {
            const std::vector<int32_t> row = topk_row(out, r, k);
            all.insert(all.end(), row.begin(), row.end());
          }
          if (first_run.empty()) {
            first_run = all;
          } else {
            EXPECT_EQ(all, first_run) << "the output depends on the thread count";
          }
        }
      }
    }
  }
}

// With fewer row blocks than threads the CPU splits each block's keys into segments scored by
// different threads and merges their selections: the logits and the selection must not change.
TEST(IndexerDecode, SingleRequestSplitAcrossThreadsIsExact) {
  FI_SEEDED_RNG(rng);
  for (int next_n : {1, 2}) {
    DecodeConfig config;
    config.batch = 1;
    config.next_n = next_n;
    config.heads = 64;
    config.max_len = 3000;
    DecodeProblem p = make_decode_problem(rng, config, {3000});
    const int k = 256;
    HostTensor reference_logits = poisoned_logits(p.rows(), p.width);
    RunOptions one_thread;
    one_thread.cpu_threads = 1;
    FI_ASSERT_OK(paged_mqa_logits(reference_logits.view(), p.q.view(), p.cache.cache(),
                                  p.weights.view(), p.context_lens.view(), p.block_table.view(),
                                  LogitsOptions{true}, one_thread));
    std::vector<int32_t> row_lengths(p.ends.begin(), p.ends.end());
    HostTensor lengths = i32_tensor(row_lengths);
    HostTensor expected = poisoned_topk_output(p.rows(), k);
    FI_ASSERT_OK(topk_per_row(expected.view(), reference_logits.view(),
                              RowRanges::decode(lengths.view()), k, TopKOptions{true}));
    for (int threads : {2, 5, 16}) {
      SCOPED_TRACE(::testing::Message() << "next_n=" << next_n << " cpu_threads=" << threads);
      RunOptions options;
      options.cpu_threads = threads;
      HostTensor logits = poisoned_logits(p.rows(), p.width);
      FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(),
                                    LogitsOptions{true}, options));
      EXPECT_EQ(std::memcmp(logits.data<float>(), reference_logits.data<float>(),
                            p.rows() * p.width * sizeof(float)),
                0)
          << "logit bits depend on the thread count";
      for (bool sorted : {false, true}) {
        HostTensor out = poisoned_topk_output(p.rows(), k);
        FI_ASSERT_OK(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(), k,
                                    TopKOptions{sorted}, options));
        EXPECT_TRUE(SameTopK(out, expected, k, sorted));
      }
    }
  }
}

// ----------------------------------------------------------------------------- workspace

TEST(IndexerPrefill, RejectsWorkspaceSmallerThanRequired) {
  Rng rng(99);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 6, 300, 32, 128);
  const int k = 64;
  const int threads = 2;
  const size_t required = indexer_cpu_workspace_size(k, threads);
  if (required == 0)
    GTEST_SKIP() << "indexer_cpu_workspace_size(64, 2) is 0: no workspace can be too small";
  std::vector<uint8_t> bytes(required - 1, kPoisonByte);
  RunOptions options;
  options.cpu_threads = threads;
  options.workspace = bytes.data();
  options.workspace_bytes = bytes.size();
  HostTensor out = poisoned_topk_output(6, k);
  const Status status = indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                        p.ks.view(), p.ke.view(), k, TopKOptions{}, options);
  EXPECT_EQ(status.code(), StatusCode::kWorkspaceTooSmall) << status_text(status);
}

TEST(IndexerDecode, RejectsWorkspaceSmallerThanRequired) {
  Rng rng(98);
  DecodeConfig config;
  DecodeProblem p = make_decode_problem(rng, config);
  const int k = 512;
  const int threads = 3;
  const size_t required = indexer_cpu_workspace_size(k, threads);
  if (required == 0)
    GTEST_SKIP() << "indexer_cpu_workspace_size(512, 3) is 0: no workspace can be too small";
  std::vector<uint8_t> bytes(required - 1, kPoisonByte);
  RunOptions options;
  options.cpu_threads = threads;
  options.workspace = bytes.data();
  options.workspace_bytes = bytes.size();
  HostTensor out = poisoned_topk_output(p.rows(), k);
  const Status status =
      indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                     p.context_lens.view(), p.block_table.view(), k, TopKOptions{}, options);
  EXPECT_EQ(status.code(), StatusCode::kWorkspaceTooSmall) << status_text(status);
}

// ----------------------------------------------------------------------------- bad input

TEST(IndexerPrefill, RejectsKAboveTheMaximum) {
  Rng rng(5);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 4, 100, 32, 128);
  HostTensor out = poisoned_topk_output(4, 4097);
  EXPECT_TRUE(
      IsRejectedNamingAnyOf(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                            p.ks.view(), p.ke.view(), 4097),
                            {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"k=4097"}));
}

TEST(IndexerPrefill, RejectsKZero) {
  Rng rng(5);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 4, 100, 32, 128);
  HostTensor out = poisoned_topk_output(4, 8);
  EXPECT_TRUE(IsRejected(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                         p.ks.view(), p.ke.view(), 0),
                         StatusCode::kInvalidArgument, {"k"}));
}

TEST(IndexerPrefill, RejectsKsGreaterThanKe) {
  Rng rng(6);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, 6, 100, 32, 128);
  p.ks.data<int32_t>()[5] = 60;
  p.ke.data<int32_t>()[5] = 59;
  HostTensor out = poisoned_topk_output(6, 8);
  EXPECT_TRUE(IsRejected(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                         p.ks.view(), p.ke.view(), 8),
                         StatusCode::kInvalidArgument, {"ks"}));
}

TEST(IndexerPrefill, RejectsNegativeMinRowKeys) {
  Rng rng(8);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 4, 100, 32, 128);
  HostTensor out = poisoned_topk_output(4, 8);
  IndexerOptions indexer_options;
  indexer_options.min_row_keys = -1;
  EXPECT_TRUE(
      IsRejected(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                 p.ks.view(), p.ke.view(), 8, TopKOptions{}, indexer_options),
                 StatusCode::kInvalidArgument, {"indexer_options.min_row_keys"}));
  // The overload kept for one release reads it from RunOptions and names it there.
  RunOptions options;
  options.min_row_keys = -1;
  EXPECT_TRUE(IsRejected(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                         p.ks.view(), p.ke.view(), 8, TopKOptions{}, options),
                         StatusCode::kInvalidArgument, {"options.min_row_keys"}));
}

// kAuto takes the fused path only for long rows the caller vouches for, at k <= 2048; an explicit
// path is kept whatever the hint.
TEST(IndexerPrefill, AutoPathIsFusedOnlyForRowsKnownToBeLong) {
  auto path = [](int k, IndexerPath asked, int64_t min_row_keys, int64_t num_keys = 0) {
    const IndexerPath chosen = cuda_prefill_path(k, IndexerOptions{asked, min_row_keys}, num_keys);
    // The overload kept for one release answers the same from RunOptions.
    RunOptions options;
    options.indexer_path = asked;
    options.min_row_keys = min_row_keys;
    EXPECT_EQ(cuda_prefill_path(k, options, num_keys), chosen) << "k=" << k;
    return chosen;
  };
  // The measured thresholds (the fewest keys every row must see), written out so that a change
  // of the rule shows here: 28672 keys at k <= 512, 36864 at k <= 1024, 45056 up to k = 2048,
  // the largest k kAuto ever sends to the fused path.
  constexpr int64_t kLongestThreshold = 45056;
  EXPECT_EQ(path(2048, IndexerPath::kAuto, 0), IndexerPath::kDense);
  EXPECT_EQ(path(2048, IndexerPath::kAuto, kLongestThreshold - 1), IndexerPath::kDense);
  EXPECT_EQ(path(2048, IndexerPath::kAuto, kLongestThreshold), IndexerPath::kFused);
  EXPECT_EQ(path(512, IndexerPath::kAuto, 1 << 20), IndexerPath::kFused);
  for (const auto& [k, keys] : std::vector<std::pair<int, int64_t>>{
           {1, 28672}, {512, 28672}, {513, 36864}, {1024, 36864}, {1025, 45056}, {2048, 45056}}) {
    EXPECT_EQ(path(k, IndexerPath::kAuto, keys - 1), IndexerPath::kDense) << "k=" << k;
    EXPECT_EQ(path(k, IndexerPath::kAuto, keys), IndexerPath::kFused) << "k=" << k;
  }
  // In a chunk of several requests (its keys at least twice the shortest row's): 17408, 23552
  // and 34816; a chunk just short of that ratio keeps the one-request threshold.
  constexpr int64_t kSeveralRequestsRatio = 2;
  for (const auto& [k, keys] :
       std::vector<std::pair<int, int64_t>>{{512, 17408}, {1024, 23552}, {2048, 34816}}) {
    const int64_t several = kSeveralRequestsRatio * keys;
    EXPECT_EQ(path(k, IndexerPath::kAuto, keys, several), IndexerPath::kFused) << "k=" << k;
    EXPECT_EQ(path(k, IndexerPath::kAuto, keys - 1, several), IndexerPath::kDense) << "k=" << k;
    EXPECT_EQ(path(k, IndexerPath::kAuto, keys, several - 1), IndexerPath::kDense) << "k=" << k;
  }
  EXPECT_EQ(path(2048, IndexerPath::kAuto, 0, 1 << 30), IndexerPath::kDense);
  EXPECT_EQ(path(2049, IndexerPath::kAuto, 1 << 20), IndexerPath::kDense);
  EXPECT_EQ(path(4096, IndexerPath::kFused, 0), IndexerPath::kFused);
  EXPECT_EQ(path(512, IndexerPath::kDense, 1 << 20), IndexerPath::kDense);
}

TEST(IndexerPrefill, RejectsOutputNarrowerThanK) {
  Rng rng(7);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 6, 100, 32, 128);
  HostTensor out = poisoned_topk_output(6, 7);
  EXPECT_TRUE(IsRejected(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                         p.ks.view(), p.ke.view(), 8),
                         StatusCode::kInvalidArgument, {"out"}));
}

TEST(IndexerPrefill, RejectsUnsupportedHeadCount) {
  Rng rng(8);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 4, 100, 48, 128);
  HostTensor out = poisoned_topk_output(4, 8);
  EXPECT_TRUE(IsRejectedNamingAnyOf(indexer_prefill(out.view(), p.q.view(), p.keys.view(),
                                                    p.weights.view(), p.ks.view(), p.ke.view(), 8),
                                    {StatusCode::kInvalidArgument, StatusCode::kUnsupported},
                                    {"48"}));
}

TEST(IndexerDecode, RejectsBlockTableEntryOutOfRange) {
  Rng rng(9);
  DecodeConfig config;
  config.batch = 2;
  DecodeProblem p = make_decode_problem(rng, config, {200, 10});
  p.block_table.at<int32_t>({0, 1}) =
      static_cast<int32_t>(p.cache.cache().num_pages);  // request 0 sees page 1
  HostTensor out = poisoned_topk_output(p.rows(), 16);
  EXPECT_TRUE(IsRejected(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                        p.context_lens.view(), p.block_table.view(), 16),
                         StatusCode::kInvalidArgument, {"block_table"}));
}

TEST(IndexerDecode, RejectsKAboveTheMaximum) {
  Rng rng(10);
  DecodeProblem p = make_decode_problem(rng, DecodeConfig{});
  HostTensor out = poisoned_topk_output(p.rows(), 4097);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                     p.context_lens.view(), p.block_table.view(), 4097),
      {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"k=4097"}));
}

TEST(IndexerDecode, RejectsOutputWithOtherRowCount) {
  Rng rng(11);
  DecodeConfig config;
  config.next_n = 2;
  DecodeProblem p = make_decode_problem(rng, config);
  HostTensor out = poisoned_topk_output(p.rows() - 1, 16);
  EXPECT_TRUE(IsRejected(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                        p.context_lens.view(), p.block_table.view(), 16),
                         StatusCode::kInvalidArgument, {"out"}));
}

}  // namespace
}  // namespace fitest
