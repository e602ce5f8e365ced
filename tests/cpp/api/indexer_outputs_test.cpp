// SPDX-License-Identifier: Apache-2.0
// The indexer's optional outputs on CPU tensors (indexer.h): the selected keys' scores are the
// bits mqa_logits / paged_mqa_logits write at their columns, and a source layer's candidate
// blocks are select_candidate_blocks over those logits, bit for bit, while the top-k stays the
// plain call's; on prefill chunks of several requests with unaligned starts, decode with next_n
// 1..4 (1-D and 2-D lengths), zero keys (ties) and huge weights (+-inf, NaN), any thread count.
#include "support/indexer_outputs.h"

#include <cstdint>
#include <vector>

#include "cpp/api/candidates_cases.h"
#include "support/kcache.h"

namespace fitest {
namespace {

struct PrefillOutputsCase {
  int64_t rows;
  int64_t keys;
  int k;
  int num_blocks;
  int block_size;
};

PrefillProblem outputs_problem(Rng& rng, const OperandCase& c, const PrefillOutputsCase& s) {
  PrefillProblem p = make_prefill_problem(rng, c.format, s.rows, s.keys, c.heads, c.head_dim);
  pack_requests(rng, p, s.block_size);
  zero_keys(rng, p.keys, c.format, c.head_dim, s.keys, s.keys / 8);
  huge_weights(rng, p.weights, 2);
  return p;
}

HostTensor prefill_logits(const PrefillProblem& p) {
  HostTensor logits = poisoned_logits(p.rows, p.num_keys);
  EXPECT_TRUE(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                         p.ke.view(), LogitsOptions{true})
                  .ok());
  return logits;
}

TEST(IndexerScores, PrefillScoresAreTheLogitsBitsOfTheSelectedKeys) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    const PrefillOutputsCase s{rng.uniform_int(9, 21), rng.uniform_int(200, 900),
                               static_cast<int>(rng.pick(std::vector<int64_t>{1, 16, 100, 300})), 8,
                               8};
    SCOPED_TRACE(::testing::Message()
                 << describe(c) << " M=" << s.rows << " N=" << s.keys << " k=" << s.k);
    PrefillProblem p = outputs_problem(rng, c, s);
    HostTensor logits = prefill_logits(p);
    for (bool sorted : {false, true}) {
      HostTensor expected = poisoned_topk_output(s.rows, s.k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::prefill(p.ks.view(), p.ke.view()), s.k,
                                TopKOptions{sorted}));
      for (int threads : {1, 3}) {
        SCOPED_TRACE(::testing::Message()
                     << (sorted ? "sorted" : "unsorted") << " threads=" << threads);
        HostTensor out = poisoned_topk_output(s.rows, s.k + 2, s.k + 5);
        HostTensor scores = poisoned_scores(s.rows, s.k + 1, s.k + 3);
        IndexerOptions indexer_options;
        indexer_options.scores = scores.view();
        RunOptions options;
        options.cpu_threads = threads;
        FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                     p.ks.view(), p.ke.view(), s.k, TopKOptions{sorted},
                                     indexer_options, options));
        EXPECT_TRUE(SameTopK(out, expected, s.k, sorted));
        EXPECT_TRUE(ScoresAreTheLogitsBits(scores, out, logits, s.k,
                                           [&](int64_t t) { return p.ks.data<int32_t>()[t]; }));
      }
    }
  }
}

DecodeConfig decode_config(Rng& rng, int next_n, bool two_dim) {
  DecodeConfig config;
  config.format = rng.bernoulli(0.5) ? KFormat::kFP8 : KFormat::kMXFP4;
  config.heads = rng.bernoulli(0.5) ? 32 : 64;
  config.batch = static_cast<int>(rng.uniform_int(1, 5));
  config.next_n = next_n;
  config.two_dim_lens = two_dim;
  config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{16, 64}));
  config.max_len = rng.uniform_int(20, 700);
  return config;
}

HostTensor decode_logits(const DecodeProblem& p) {
  const int64_t width = p.block_table.size(1) * p.config.page_size;
  HostTensor logits = poisoned_logits(p.rows(), width);
  EXPECT_TRUE(paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                               p.context_lens.view(), p.block_table.view(), LogitsOptions{true})
                  .ok());
  return logits;
}

TEST(IndexerScores, DecodeScoresAreThePagedLogitsBitsForNextN1To4) {
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      const DecodeConfig config = decode_config(rng, next_n, two_dim);
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{8, 64, 257}));
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      huge_weights(rng, p.weights, 1);
      HostTensor logits = decode_logits(p);
      HostTensor expected = poisoned_topk_output(p.rows(), k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::decode(p.context_lens.view(), next_n), k,
                                TopKOptions{true}));
      for (int threads : {1, 4}) {
        HostTensor out = poisoned_topk_output(p.rows(), k, k + 2);
        HostTensor scores = poisoned_scores(p.rows(), k, k + 1);
        IndexerOptions indexer_options;
        indexer_options.scores = scores.view();
        RunOptions options;
        options.cpu_threads = threads;
        FI_ASSERT_OK(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(), k,
                                    TopKOptions{true}, indexer_options, options));
        EXPECT_TRUE(SameTopK(out, expected, k, true));
        EXPECT_TRUE(ScoresAreTheLogitsBits(scores, out, logits, k, [](int64_t) { return 0; }));
      }
    }
  }
}

TEST(IndexerScores, ExactConsumerScoresAreTheLogitsBitsOfItsSelection) {
  FI_SEEDED_RNG(rng);
  const OperandCase& c = kOperandCases[0];
  const PrefillOutputsCase s{17, 700, 40, 8, 8};
  PrefillProblem p = outputs_problem(rng, c, s);
  HostTensor logits = prefill_logits(p);
  HostTensor cand(DType::kI32, {s.rows, s.num_blocks});
  const CandidateRows rows = CandidateRows::prefill(p.ks.view(), p.ke.view());
  FI_ASSERT_OK(select_candidate_blocks(cand.view(), logits.view(), rows, s.num_blocks, 8));
  for (int64_t i = 0; i < s.rows * s.num_blocks; i += 5) cand.data<int32_t>()[i] = -1;
  HostTensor expected = poisoned_topk_output(s.rows, s.k);
  HostTensor masked = copy_of(logits);
  FI_ASSERT_OK(candidate_topk_per_row(expected.view(), masked.view(), rows, cand.view(), 8, s.k,
                                      CandidateTopKOptions{true, false}));
  HostTensor out = poisoned_topk_output(s.rows, s.k);
  HostTensor scores = poisoned_scores(s.rows, s.k, s.k + 4);
  IndexerOptions indexer_options;
  indexer_options.candidates = CandidateInput{cand.view(), 8, false};
  indexer_options.scores = scores.view();
  FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                               p.ke.view(), s.k, TopKOptions{true}, indexer_options));
  EXPECT_TRUE(SameTopK(out, expected, s.k, true));
  EXPECT_TRUE(ScoresAreTheLogitsBits(scores, out, logits, s.k,
                                     [&](int64_t t) { return p.ks.data<int32_t>()[t]; }));

  // Decode: a request's next_n rows share one candidate row.
  DecodeProblem d = make_decode_problem(rng, decode_config(rng, 3, false));
  HostTensor dlogits = decode_logits(d);
  HostTensor ends = decode_row_ends(d.ends);
  HostTensor dcand(DType::kI32, {d.rows(), 16});
  FI_ASSERT_OK(select_candidate_blocks(dcand.view(), dlogits.view(),
                                       CandidateRows::decode(ends.view()), 16, 8));
  HostTensor dout = poisoned_topk_output(d.rows(), 32);
  HostTensor dscores = poisoned_scores(d.rows(), 32);
  IndexerOptions decode_options;
  decode_options.candidates = CandidateInput{dcand.view(), 8, false};
  decode_options.scores = dscores.view();
  FI_ASSERT_OK(indexer_decode(dout.view(), d.q.view(), d.cache.cache(), d.weights.view(),
                              d.context_lens.view(), d.block_table.view(), 32, TopKOptions{false},
                              decode_options));
  EXPECT_TRUE(ScoresAreTheLogitsBits(dscores, dout, dlogits, 32, [](int64_t) { return 0; }));
}

// ----------------------------------------------------------------------------- candidate output

TEST(IndexerCandidateSource, PrefillPublishesSelectCandidateBlocksOfMqaLogits) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    for (int trial = 0; trial < 2; ++trial) {
      const PrefillOutputsCase s{
          rng.uniform_int(trial == 0 ? 2 : 9, trial == 0 ? 4 : 24), rng.uniform_int(150, 1200),
          static_cast<int>(rng.pick(std::vector<int64_t>{16, 64, 300})),
          static_cast<int>(rng.pick(std::vector<int64_t>{1, 8, 16, 64, 200})),
          static_cast<int>(rng.pick(std::vector<int64_t>{1, 8, 16, 5}))};
      SCOPED_TRACE(::testing::Message()
                   << describe(c) << " M=" << s.rows << " N=" << s.keys << " k=" << s.k
                   << " C=" << s.num_blocks << " cb=" << s.block_size);
      PrefillProblem p = outputs_problem(rng, c, s);
      HostTensor logits = prefill_logits(p);
      HostTensor expected_blocks = poisoned_topk_output(s.rows, s.num_blocks);
      FI_ASSERT_OK(select_candidate_blocks(expected_blocks.view(), logits.view(),
                                           CandidateRows::prefill(p.ks.view(), p.ke.view()),
                                           s.num_blocks, s.block_size));
      HostTensor expected = poisoned_topk_output(s.rows, s.k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::prefill(p.ks.view(), p.ke.view()), s.k,
                                TopKOptions{false}));
      // 3 threads over 1 row block split its keys into segments, whose maxima merge.
      for (int threads : {1, 3}) {
        for (bool with_scores : {false, true}) {
          SCOPED_TRACE(::testing::Message()
                       << "threads=" << threads << (with_scores ? " with scores" : ""));
          HostTensor out = poisoned_topk_output(s.rows, s.k, s.k + 1);
          HostTensor blocks = poisoned_topk_output(s.rows, s.num_blocks, s.num_blocks + 3);
          HostTensor scores = poisoned_scores(s.rows, s.k);
          IndexerOptions indexer_options;
          indexer_options.candidate_source = CandidateOutput{blocks.view(), s.block_size};
          if (with_scores) indexer_options.scores = scores.view();
          RunOptions options;
          options.cpu_threads = threads;
          FI_ASSERT_OK(indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                       p.ks.view(), p.ke.view(), s.k, TopKOptions{false},
                                       indexer_options, options));
          EXPECT_TRUE(SameTopK(out, expected, s.k, false));
          EXPECT_TRUE(SameBlocks(blocks, expected_blocks, s.num_blocks));
          if (with_scores) {
            EXPECT_TRUE(ScoresAreTheLogitsBits(scores, out, logits, s.k,
                                               [&](int64_t t) { return p.ks.data<int32_t>()[t]; }));
          }
        }
      }
    }
  }
}

TEST(IndexerCandidateSource, DecodePublishesSelectCandidateBlocksOfPagedLogitsForNextN1To4) {
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      const DecodeConfig config = decode_config(rng, next_n, two_dim);
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{8, 100}));
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 32, 128}));
      const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16, 3}));
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k) +
                   " C=" + std::to_string(num_blocks) + " cb=" + std::to_string(block_size));
      DecodeProblem p = make_decode_problem(rng, config);
      huge_weights(rng, p.weights, 1);
      HostTensor logits = decode_logits(p);
      HostTensor ends = decode_row_ends(p.ends);
      HostTensor expected_blocks = poisoned_topk_output(p.rows(), num_blocks);
      FI_ASSERT_OK(select_candidate_blocks(expected_blocks.view(), logits.view(),
                                           CandidateRows::decode(ends.view()), num_blocks,
                                           block_size));
      HostTensor expected = poisoned_topk_output(p.rows(), k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::decode(p.context_lens.view(), next_n), k,
                                TopKOptions{true}));
      for (int threads : {1, 5}) {
        HostTensor out = poisoned_topk_output(p.rows(), k);
        HostTensor blocks = poisoned_topk_output(p.rows(), num_blocks, num_blocks + 2);
        IndexerOptions indexer_options;
        indexer_options.candidate_source = CandidateOutput{blocks.view(), block_size};
        RunOptions options;
        options.cpu_threads = threads;
        FI_ASSERT_OK(indexer_decode(out.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(), k,
                                    TopKOptions{true}, indexer_options, options));
        EXPECT_TRUE(SameTopK(out, expected, k, true));
        EXPECT_TRUE(SameBlocks(blocks, expected_blocks, num_blocks));
      }
    }
  }
}

// ----------------------------------------------------------------------------- bad arguments

TEST(IndexerOutputs, RejectBadArgumentsNamingThem) {
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 64, 32, 128);
  HostTensor out(DType::kI32, {8, 16});
  auto run = [&](const IndexerOptions& indexer_options) {
    return indexer_prefill(out.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                           p.ke.view(), 16, TopKOptions{}, indexer_options);
  };
  HostTensor scores_i32(DType::kI32, {8, 16});
  HostTensor scores_narrow(DType::kF32, {8, 15});
  HostTensor scores_rows(DType::kF32, {7, 16});
  HostTensor scores(DType::kF32, {8, 16});
  HostTensor blocks_f32(DType::kF32, {8, 4});
  HostTensor blocks_rows(DType::kI32, {9, 4});
  HostTensor blocks_wide(DType::kI32, {8, 5000});
  HostTensor blocks(DType::kI32, {8, 4});
  IndexerOptions o;
  o.scores = scores_i32.view();
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument, {"indexer_options.scores", "i32"}));
  o.scores = scores_narrow.view();
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument, {"indexer_options.scores", "15"}));
  o.scores = scores_rows.view();
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument, {"indexer_options.scores", "7"}));
  o = {};
  o.candidate_source = CandidateOutput{blocks_f32.view(), 8};
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument,
                         {"indexer_options.candidate_source.blocks", "f32"}));
  o.candidate_source = CandidateOutput{blocks_rows.view(), 8};
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument,
                         {"indexer_options.candidate_source.blocks", "9"}));
  o.candidate_source = CandidateOutput{blocks_wide.view(), 8};
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument, {"5000", "4096"}));
  o.candidate_source = CandidateOutput{blocks.view(), 0};
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kInvalidArgument,
                         {"indexer_options.candidate_source.block_size=0"}));
  // A layer both consumer and source, and scores of the masking consumer: refused.
  o.candidate_source = CandidateOutput{blocks.view(), 8};
  o.candidates = CandidateInput{blocks.view(), 8, false};
  EXPECT_TRUE(IsRejected(run(o), StatusCode::kUnsupported,
                         {"indexer_options.candidates", "indexer_options.candidate_source"}));
  o = {};
  o.candidates = CandidateInput{blocks.view(), 8, true};
  o.scores = scores.view();
  EXPECT_TRUE(
      IsRejected(run(o), StatusCode::kUnsupported, {"indexer_options.scores", "vllm_compatible"}));
  // kFused means nothing on the CPU: the CPU serves a candidate output whatever the path.
  o = {};
  o.path = IndexerPath::kFused;
  o.candidate_source = CandidateOutput{blocks.view(), 8};
  FI_EXPECT_OK(run(o));
  // The CUDA path query: kAuto with a candidate output picks as without it (long rows: the
  // fused path) for block sizes of a multiple of 8, and the dense path for any other.
  IndexerOptions source;
  source.candidate_source = CandidateOutput{blocks.view(), 8};
  source.min_row_keys = 1 << 20;
  EXPECT_EQ(cuda_prefill_path(512, source, 1 << 20), IndexerPath::kFused);
  source.min_row_keys = 0;
  EXPECT_EQ(cuda_prefill_path(512, source, 1 << 20), IndexerPath::kDense);
  source.min_row_keys = 1 << 20;
  source.candidate_source.block_size = 12;
  EXPECT_EQ(cuda_prefill_path(512, source, 1 << 20), IndexerPath::kDense);
}

}  // namespace
}  // namespace fitest
