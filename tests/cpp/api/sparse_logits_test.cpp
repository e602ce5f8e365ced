// SPDX-License-Identifier: Apache-2.0
// sparse_mqa_logits / paged_sparse_mqa_logits on CPU tensors (candidates.h): every valid column
// has the bits the dense logits op gives its key (FP8 and MXFP4, both head counts and dims),
// -inf or untouched past end as asked, the padding columns past S * SBK never written; the
// sparse consumer pipeline (indices, sparse logits, top-k over [0, end), remap) equals the
// exact dense consumer; bad arguments are rejected naming them.
#include <cstdint>
#include <vector>

#include "cpp/api/sparse_logits_cases.h"

namespace fitest {
namespace {

constexpr int kPad = 5;  // logits columns past S * SBK, which must stay poisoned

TEST(SparseLogits, PrefillColumnsHaveTheDenseLogitsBits) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    for (int block_size : {8, 16, 32}) {
      const int sparse_block = block_size == 8 ? 8 : 16;
      const int64_t M = rng.uniform_int(6, 20);
      const int64_t N = rng.uniform_int(50, 1200);
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 16, 64}));
      SCOPED_TRACE(::testing::Message() << describe(c) << " M=" << M << " N=" << N
                                        << " cb=" << block_size << " C=" << num_blocks);
      PrefillProblem p = make_prefill_problem(rng, c.format, M, N, c.heads, c.head_dim);
      // The dense logits of every key, for every row (the sparse op's keys need no bounds).
      HostTensor all_ks(DType::kI32, {M});
      HostTensor all_ke(DType::kI32, {M});
      all_ks.fill<int32_t>(0);
      all_ke.fill<int32_t>(static_cast<int32_t>(N));
      HostTensor dense = poisoned_logits(M, N);
      FI_ASSERT_OK(mqa_logits(dense.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              all_ks.view(), all_ke.view(), LogitsOptions{true}));
      std::vector<int64_t> row_blocks(M);
      for (int64_t t = 0; t < M; ++t) {
        const int64_t n = p.ke.data<int32_t>()[t] - p.ks.data<int32_t>()[t];
        row_blocks[t] = (n + block_size - 1) / block_size;
      }
      const HostTensor cand = distinct_candidates(rng, M, num_blocks, row_blocks);
      const CandidateRows rows = CandidateRows::prefill(p.ks.view(), p.ke.view());
      const int64_t S = int64_t{num_blocks} * (block_size / sparse_block);
      HostTensor indices(DType::kI32, {M, S});
      HostTensor end(DType::kI32, {M});
      FI_ASSERT_OK(candidate_blocks_to_sparse_indices(indices.view(), end.view(), cand.view(), rows,
                                                      block_size, sparse_block));
      for (bool clean : {true, false}) {
        for (int threads : {1, 3}) {
          HostTensor got = poisoned_logits(M, S * sparse_block + kPad);
          RunOptions options;
          options.cpu_threads = threads;
          FI_ASSERT_OK(sparse_mqa_logits(got.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                         indices.view(), end.view(), rows, sparse_block,
                                         LogitsOptions{clean}, options));
          EXPECT_TRUE(SparseLogitsMatch(got, dense, indices, end, sparse_block, clean,
                                        packed_firsts(p.ks, sparse_block)));
        }
      }
      // The consumer over the sparse logits: top-k over [0, end), remapped, equals the exact
      // consumer over the dense logits of the call's rows.
      HostTensor row_logits = poisoned_logits(M, N);
      FI_ASSERT_OK(mqa_logits(row_logits.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              p.ks.view(), p.ke.view(), LogitsOptions{true}));
      for (bool sorted : {false, true}) {
        const int k = static_cast<int>(rng.uniform_int(1, 300));
        HostTensor expected = poisoned_topk_output(M, k);
        FI_ASSERT_OK(candidate_topk_per_row(expected.view(), row_logits.view(), rows, cand.view(),
                                            block_size, k, CandidateTopKOptions{sorted, false}));
        HostTensor sparse = poisoned_logits(M, S * sparse_block);
        FI_ASSERT_OK(sparse_mqa_logits(sparse.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                       indices.view(), end.view(), rows, sparse_block));
        HostTensor columns = poisoned_topk_output(M, k);
        FI_ASSERT_OK(topk_per_row(columns.view(), sparse.view(), RowRanges::decode(end.view()), k,
                                  TopKOptions{sorted}));
        FI_ASSERT_OK(
            sparse_topk_remap(columns.view(), columns.view(), indices.view(), rows, sparse_block));
        EXPECT_TRUE(SameTopK(columns, expected, k, true)) << (sorted ? "sorted" : "unsorted");
      }
    }
  }
}

TEST(SparseLogits, DecodeColumnsHaveTheDenseLogitsBits) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    for (int next_n : {1, 3}) {
      DecodeConfig config;
      config.format = c.format;
      config.heads = c.heads;
      config.head_dim = c.head_dim;
      config.batch = static_cast<int>(rng.uniform_int(1, 6));
      config.next_n = next_n;
      config.two_dim_lens = rng.bernoulli(0.5);
      config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{16, 32, 64}));
      config.max_len = rng.uniform_int(20, 900);
      const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16}));
      const int sparse_block = block_size;
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{8, 32}));
      SCOPED_TRACE(describe(config) + " cb=" + std::to_string(block_size));
      DecodeProblem p = make_decode_problem(rng, config);
      const int64_t rows = p.rows();
      const int64_t width = p.block_table.size(1) * config.page_size;
      HostTensor dense = poisoned_logits(rows, width);
      FI_ASSERT_OK(paged_mqa_logits(dense.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                    p.context_lens.view(), p.block_table.view(),
                                    LogitsOptions{true}));
      const DecodeSparseColumns columns = decode_sparse_columns(rng, p, block_size, num_blocks);
      FI_ASSERT_OK(columns.status);
      const HostTensor& indices = columns.indices;
      const HostTensor& end = columns.end;
      for (bool clean : {true, false}) {
        HostTensor got = poisoned_logits(rows, num_blocks * sparse_block + kPad);
        FI_ASSERT_OK(paged_sparse_mqa_logits(
            got.view(), p.q.view(), p.cache.cache(), p.weights.view(), indices.view(), end.view(),
            p.block_table.view(), sparse_block, LogitsOptions{clean}));
        EXPECT_TRUE(SparseLogitsMatch(got, dense, indices, end, sparse_block, clean));
      }
    }
  }
}

TEST(SparseLogits, RejectsBadArgumentsNamingThem) {
  FI_SEEDED_RNG(rng);
  const int64_t M = 4, N = 64;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, M, N, 32, 128);
  const CandidateRows rows = CandidateRows::prefill(p.ks.view(), p.ke.view());
  HostTensor indices(DType::kI32, {M, 4});
  indices.fill<int32_t>(0);
  HostTensor end(DType::kI32, {M});
  end.fill<int32_t>(8);
  HostTensor logits = poisoned_logits(M, 32);
  auto run = [&](const HostTensor& out, const HostTensor& idx, const HostTensor& e, int sbk) {
    return sparse_mqa_logits(out.view(), p.q.view(), p.keys.view(), p.weights.view(), idx.view(),
                             e.view(), rows, sbk);
  };
  FI_ASSERT_OK(run(logits, indices, end, 8));
  EXPECT_TRUE(
      IsRejected(run(logits, indices, end, 12), StatusCode::kInvalidArgument, {"sparse_block"}));
  EXPECT_TRUE(IsRejected(run(poisoned_logits(M, 31), indices, end, 8), StatusCode::kInvalidArgument,
                         {"logits"}));
  HostTensor long_end(DType::kI32, {M});
  long_end.fill<int32_t>(33);
  EXPECT_TRUE(IsRejected(run(logits, indices, long_end, 8), StatusCode::kInvalidArgument, {"end"}));
  HostTensor far(DType::kI32, {M, 4});
  far.fill<int32_t>(8);  // keys 64.. of 64
  EXPECT_TRUE(
      IsRejected(run(logits, far, end, 8), StatusCode::kInvalidArgument, {"sparse_indices"}));
  HostTensor wrong(DType::kI64, {M, 4});
  EXPECT_TRUE(
      IsRejected(run(logits, wrong, end, 8), StatusCode::kInvalidArgument, {"sparse_indices"}));
  // Decode: a page size that is no multiple of the sparse block.
  DecodeConfig config;
  config.page_size = 4;
  config.max_len = 40;
  DecodeProblem d = make_decode_problem(rng, config);
  HostTensor d_indices(DType::kI32, {d.rows(), 2});
  d_indices.fill<int32_t>(0);
  HostTensor d_end(DType::kI32, {d.rows()});
  d_end.fill<int32_t>(0);
  HostTensor d_logits = poisoned_logits(d.rows(), 16);
  EXPECT_TRUE(IsRejected(
      paged_sparse_mqa_logits(d_logits.view(), d.q.view(), d.cache.cache(), d.weights.view(),
                              d_indices.view(), d_end.view(), d.block_table.view(), 8),
      StatusCode::kInvalidArgument, {"page_size"}));
}

}  // namespace
}  // namespace fitest
