// SPDX-License-Identifier: Apache-2.0
// The consumer form of indexer_prefill / indexer_decode on CPU tensors (IndexerOptions::
// candidates): equal to candidate_topk_per_row over the CPU logits ops' output with the indexer's
// own row ranges as bounds, exact and vLLM-compatible, prefill chunks of several requests and
// decode with next_n 1..4 (1-D and 2-D lengths) whose rows share one candidate row.
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpp/api/candidates_cases.h"
#include "support/kcache.h"

namespace fitest {
namespace {

// The source's blocks on `logits`, mangled: duplicates, -1 and out-of-range entries.
HostTensor consumer_candidates(Rng& rng, const HostTensor& logits, const CandidateRows& rows,
                               int64_t count, int num_blocks, int block_size) {
  HostTensor cand(DType::kI32, {count, num_blocks});
  EXPECT_TRUE(
      select_candidate_blocks(cand.view(), logits.view(), rows, num_blocks, block_size).ok());
  for (int64_t i = 0; i < count * num_blocks; ++i) {
    if (rng.bernoulli(0.15))
      cand.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(-3, 5000));
  }
  return cand;
}

TEST(IndexerConsumer, PrefillEqualsTheConsumerOverMqaLogits) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : {kOperandCases[0], kOperandCases[2]}) {
    for (bool vllm : {false, true}) {
      const int64_t M = rng.uniform_int(10, 24);
      const int64_t N = rng.uniform_int(300, 1500);
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 16, 64}));
      const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16}));
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{8, 64, 300}));
      SCOPED_TRACE(::testing::Message()
                   << describe(c) << " M=" << M << " N=" << N << " C=" << num_blocks
                   << " cb=" << block_size << " k=" << k << (vllm ? " vllm" : " exact"));
      PrefillProblem p = make_prefill_problem(rng, c.format, M, N, c.heads, c.head_dim);
      HostTensor logits = poisoned_logits(M, N);
      FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              p.ks.view(), p.ke.view(), LogitsOptions{true}));
      const CandidateRows rows = CandidateRows::prefill(p.ks.view(), p.ke.view());
      HostTensor cand = consumer_candidates(rng, logits, rows, M, num_blocks, block_size);
      for (bool sorted : {false, true}) {
        HostTensor expected = poisoned_topk_output(M, k);
        HostTensor masked = copy_of(logits);
        FI_ASSERT_OK(candidate_topk_per_row(expected.view(), masked.view(), rows, cand.view(),
                                            block_size, k, CandidateTopKOptions{sorted, vllm}));
        IndexerOptions indexer_options;
        indexer_options.candidates = CandidateInput{cand.view(), block_size, vllm};
        for (int threads : {1, 3}) {
          HostTensor out = poisoned_topk_output(M, k + 2, k + 5);
          RunOptions options;
          options.cpu_threads = threads;
          FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                       p.ks.view(), p.ke.view(), k, TopKOptions{sorted},
                                       indexer_options, options));
          EXPECT_TRUE(SameTopK(out, expected, k, true));
        }
      }
    }
  }
}

TEST(IndexerConsumer, DecodeEqualsTheConsumerOverPagedLogitsForNextN1To4) {
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (int form = 0; form < 4; ++form) {
      const bool two_dim = form % 2 == 1;
      const bool vllm = form >= 2;
      DecodeConfig config;
      config.format = rng.bernoulli(0.5) ? KFormat::kFP8 : KFormat::kMXFP4;
      config.batch = static_cast<int>(rng.uniform_int(2, 6));
      config.next_n = next_n;
      config.two_dim_lens = two_dim;
      config.page_size = 64;
      config.max_len = rng.uniform_int(100, 900);
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{16, 100}));
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k) + (vllm ? " vllm" : " exact"));
      DecodeProblem p = make_decode_problem(rng, config);
      const int64_t rows = p.rows();
      const int64_t width = p.block_table.size(1) * config.page_size;
      HostTensor logits = poisoned_logits(rows, width);
      FI_ASSERT_OK(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(),
                                    LogitsOptions{true}));
      HostTensor ends(DType::kI32, {rows});
      for (int64_t r = 0; r < rows; ++r) ends.data<int32_t>()[r] = static_cast<int32_t>(p.ends[r]);
      const CandidateRows bounds = CandidateRows::decode(ends.view());
      HostTensor cand = consumer_candidates(rng, logits, bounds, rows, 16, 8);
      for (int64_t r = 0; r < rows; ++r) {  // a request's next_n rows share its first row's
        std::memcpy(&cand.at<int32_t>({r, 0}), &cand.at<int32_t>({r - r % next_n, 0}), 16 * 4);
      }
      HostTensor expected = poisoned_topk_output(rows, k);
      HostTensor masked = copy_of(logits);
      FI_ASSERT_OK(candidate_topk_per_row(expected.view(), masked.view(), bounds, cand.view(), 8, k,
                                          CandidateTopKOptions{true, vllm}));
      IndexerOptions indexer_options;
      indexer_options.candidates = CandidateInput{cand.view(), 8, vllm};
      HostTensor out = poisoned_topk_output(rows, k, k + 3);
      FI_ASSERT_OK(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                  p.context_lens.view(), p.block_table.view(), k, TopKOptions{true},
                                  indexer_options));
      EXPECT_TRUE(SameTopK(out, expected, k, true));
    }
  }
}

TEST(IndexerConsumer, RejectsBadCandidateInputNamingIt) {
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 64, 32, 128);
  HostTensor out(DType::kI32, {8, 16});
  HostTensor wrong_rows(DType::kI32, {7, 4});
  HostTensor wrong_dtype(DType::kI64, {8, 4});
  HostTensor too_many(DType::kI32, {8, 5000});
  HostTensor good(DType::kI32, {8, 4});
  auto run = [&](const TensorView& blocks, int block_size) {
    IndexerOptions indexer_options;
    indexer_options.candidates = CandidateInput{blocks, block_size, false};
    return indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                           p.ke.view(), 16, TopKOptions{}, indexer_options);
  };
  EXPECT_TRUE(IsRejected(run(wrong_rows.view(), 8), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.blocks", "[7, 4]"}));
  EXPECT_TRUE(IsRejected(run(wrong_dtype.view(), 8), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.blocks", "i64"}));
  EXPECT_TRUE(IsRejected(run(too_many.view(), 8), StatusCode::kInvalidArgument, {"5000", "4096"}));
  EXPECT_TRUE(IsRejected(run(good.view(), 0), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.block_size=0"}));
  // The sparse path: only for a consumer, exact, with cb 8, 16 or 32.
  auto sparse = [&](const TensorView& blocks, int block_size, bool vllm) {
    IndexerOptions indexer_options;
    indexer_options.path = IndexerPath::kSparse;
    if (blocks.defined()) indexer_options.candidates = CandidateInput{blocks, block_size, vllm};
    return indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                           p.ke.view(), 16, TopKOptions{}, indexer_options);
  };
  FI_EXPECT_OK(sparse(good.view(), 16, false));
  EXPECT_TRUE(IsRejected(sparse(TensorView{}, 8, false), StatusCode::kInvalidArgument,
                         {"kSparse", "indexer_options.candidates"}));
  EXPECT_TRUE(IsRejected(sparse(good.view(), 24, false), StatusCode::kInvalidArgument,
                         {"kSparse", "block_size=24"}));
  EXPECT_TRUE(IsRejected(sparse(good.view(), 8, true), StatusCode::kInvalidArgument,
                         {"kSparse", "vllm_compatible"}));
}

// A step's prebuilt sparse rows serve the CUDA sparse path only: a CPU call, the masking form or
// another block size refuse them naming the argument, and the builders take GPU tensors only.
TEST(IndexerConsumer, RejectsPrebuiltSparseRowsWhereNoSparsePathRuns) {
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 64, 32, 128);
  HostTensor out(DType::kI32, {8, 16});
  HostTensor blocks(DType::kI32, {8, 4});
  HostTensor rows_buffer(DType::kU8, {4096});
  HostTensor wrong_dtype(DType::kI32, {1024});
  auto run = [&](const TensorView& sparse_rows, int block_size, bool vllm) {
    IndexerOptions indexer_options;
    indexer_options.candidates = CandidateInput{blocks.view(), block_size, vllm};
    indexer_options.candidates.sparse_rows = sparse_rows;
    return indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                           p.ke.view(), 16, TopKOptions{}, indexer_options);
  };
  EXPECT_TRUE(IsRejected(run(rows_buffer.view(), 8, false), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.sparse_rows", "CPU consumer takes none"}));
  EXPECT_TRUE(IsRejected(run(rows_buffer.view(), 8, true), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.sparse_rows", "vllm_compatible"}));
  EXPECT_TRUE(IsRejected(run(rows_buffer.view(), 12, false), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.sparse_rows", "8, 16 or 32"}));
  EXPECT_TRUE(IsRejected(run(wrong_dtype.view(), 8, false), StatusCode::kInvalidArgument,
                         {"indexer_options.candidates.sparse_rows", "i32"}));
  const CandidateInput input{blocks.view(), 8, false};
  EXPECT_TRUE(IsRejected(
      build_sparse_consumer_rows_prefill(rows_buffer.view(), input, p.ks.view(), p.ke.view(), 64),
      StatusCode::kInvalidArgument, {"build_sparse_consumer_rows_prefill", "candidates.blocks"}));
  DecodeConfig config;
  DecodeProblem d = make_decode_problem(rng, config);
  EXPECT_TRUE(IsRejected(
      build_sparse_consumer_rows_decode(rows_buffer.view(), input, d.context_lens.view(),
                                        d.block_table.view(), 1, d.cache.cache()),
      StatusCode::kInvalidArgument, {"build_sparse_consumer_rows_decode", "candidates.blocks"}));
}

}  // namespace
}  // namespace fitest
