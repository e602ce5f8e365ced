// SPDX-License-Identifier: Apache-2.0
// DCP after an indexer that returns its selected scores (dist.h, dcp_pack_candidates_from_scores):
// packing from the scores gives the very candidates packing from the logits gives (NaN, +-inf,
// +-0 and ties included), and the whole flow (per-rank indexer with scores -> pack -> merge)
// equals the logits-based flow and the un-sharded indexer, on CPU tensors.
#include <cstdint>
#include <vector>

#include "support/dcp_indexer.h"
#include "support/dcp_simulation.h"
#include "support/indexer_outputs.h"

namespace fitest {
namespace {

TEST(DcpFromScores, PackFromScoresEqualsPackFromLogits) {
  FI_SEEDED_RNG(rng);
  for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
    for (bool prefill : {false, true}) {
      DcpCase c;
      c.ranks = static_cast<int>(rng.uniform_int(1, 4));
      c.interleave = static_cast<int>(rng.pick(std::vector<int64_t>{1, 2, 64}));
      c.k = static_cast<int>(rng.pick(std::vector<int64_t>{1, 16, 64}));
      c.prefill = prefill;
      c.fill = fill;
      c.rows = rng.uniform_int(1, 9);
      SCOPED_TRACE(describe(c));
      DcpSimulation sim = simulate_dcp(rng, c);
      for (int rank = 0; rank < c.ranks; ++rank) {
        const DcpRankInputs& in = sim.ranks[rank];
        HostTensor scores = poisoned_scores(c.rows, c.k);
        for (int64_t t = 0; t < c.rows; ++t) {
          const int64_t start = prefill ? in.row_starts.data<int32_t>()[t] : 0;
          for (int i = 0; i < c.k; ++i) {
            const int32_t l = in.local_topk.at<int32_t>({t, i});
            scores.at<float>({t, i}) = l >= 0 ? in.logits.at<float>({t, start + l}) : -kInf;
          }
        }
        HostTensor packed(DType::kI64, {c.rows, c.k + 2});
        packed.fill<int64_t>(0x5A5A5A5A5A5A5A5A);
        FI_ASSERT_OK(dcp_pack_candidates_from_scores(packed.view(), scores.view(),
                                                     in.local_topk.view(), c.k, rank,
                                                     DcpGroup{c.ranks, c.interleave}));
        for (int64_t t = 0; t < c.rows; ++t) {
          for (int i = 0; i < c.k; ++i) {
            ASSERT_EQ(packed.at<int64_t>({t, i}), in.packed.at<int64_t>({t, i}))
                << "rank " << rank << " row " << t << " slot " << i;
          }
          for (int i = c.k; i < c.k + 2; ++i) {
            ASSERT_EQ(packed.at<int64_t>({t, i}), int64_t{0x5A5A5A5A5A5A5A5A});
          }
        }
      }
    }
  }
}

TEST(DcpFromScores, IndexerWithScoresFlowEqualsTheLogitsFlowAndTheUnshardedIndexer) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : {kOperandCases[0], kOperandCases[2]}) {
    for (int trial = 0; trial < 3; ++trial) {
      const DcpGroup group{static_cast<int>(rng.uniform_int(1, 4)),
                           static_cast<int>(rng.pick(std::vector<int64_t>{1, 1, 4}))};
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{8, 64, 200}));
      const int64_t rows = rng.uniform_int(3, 12);
      const int64_t num_keys = rng.uniform_int(50, 1500);
      SCOPED_TRACE(::testing::Message()
                   << describe(c) << " N=" << group.ranks << " I=" << group.interleave << " k=" << k
                   << " rows=" << rows << " keys=" << num_keys);
      PrefillProblem p = make_prefill_problem(rng, c.format, rows, num_keys, c.heads, c.head_dim);
      zero_keys(rng, p.keys, c.format, c.head_dim, num_keys, num_keys / 10);
      for (int64_t t = 0; t < rows; ++t) {
        p.ks.data<int32_t>()[t] = 0;
        p.ke.data<int32_t>()[t] = static_cast<int32_t>(rng.uniform_int(0, num_keys));
      }
      // The un-sharded answer.
      HostTensor expected = poisoned_topk_output(rows, k);
      FI_ASSERT_OK(indexer_prefill(expected.view(), p.q.view(), p.keys.view(), p.weights.view(),
                                   p.ks.view(), p.ke.view(), k, TopKOptions{true}));
      HostTensor from_scores(DType::kI64, {rows, group.ranks * static_cast<int64_t>(k)});
      HostTensor from_logits(DType::kI64, {rows, group.ranks * static_cast<int64_t>(k)});
      for (int rank = 0; rank < group.ranks; ++rank) {
        const Operand local = shard_keys(p.keys, c.format, c.head_dim, num_keys, rank, group);
        const HostTensor local_ke = local_row_ends(p.ke, rank, group);
        const int64_t width = local.values.size(0);
        // Scores flow: the indexer returns its scores; no logits.
        HostTensor local_topk = poisoned_topk_output(rows, k);
        HostTensor scores = poisoned_scores(rows, k);
        IndexerOptions indexer_options;
        indexer_options.scores = scores.view();
        FI_ASSERT_OK(indexer_prefill(local_topk.view(), p.q.view(), local.view(), p.weights.view(),
                                     p.ks.view(), local_ke.view(), k, TopKOptions{false},
                                     indexer_options));
        TensorView block = from_scores.view();
        block.data = from_scores.data<int64_t>() + static_cast<int64_t>(rank) * k;
        block.shape[1] = k;
        FI_ASSERT_OK(dcp_pack_candidates_from_scores(block, scores.view(), local_topk.view(), k,
                                                     rank, group));
        // Logits flow: mqa_logits, topk_per_row, pack from the logits.
        HostTensor logits = poisoned_logits(rows, std::max<int64_t>(width, 1));
        FI_ASSERT_OK(mqa_logits(logits.view(), p.q.view(), local.view(), p.weights.view(),
                                p.ks.view(), local_ke.view(), LogitsOptions{true}));
        HostTensor logits_topk = poisoned_topk_output(rows, k);
        FI_ASSERT_OK(topk_per_row(logits_topk.view(), logits.view(),
                                  RowRanges::prefill(p.ks.view(), local_ke.view()), k));
        EXPECT_TRUE(SameTopK(local_topk, logits_topk, k, false));
        TensorView logits_block = from_logits.view();
        logits_block.data = from_logits.data<int64_t>() + static_cast<int64_t>(rank) * k;
        logits_block.shape[1] = k;
        FI_ASSERT_OK(dcp_pack_candidates(logits_block, logits.view(), logits_topk.view(),
                                         p.ks.view(), k, rank, group));
      }
      for (int64_t i = 0; i < rows * group.ranks * k; ++i) {
        ASSERT_EQ(from_scores.data<int64_t>()[i], from_logits.data<int64_t>()[i]) << "slot " << i;
      }
      HostTensor merged = poisoned_topk_output(rows, k);
      FI_ASSERT_OK(
          dcp_merge_topk(merged.view(), from_scores.view(), k, group.ranks, TopKOptions{true}));
      EXPECT_TRUE(SameTopK(merged, expected, k, true));
    }
  }
}

TEST(DcpFromScores, RejectsBadArgumentsNamingThem) {
  HostTensor scores(DType::kF32, {4, 8});
  HostTensor scores_bf16(DType::kBF16, {4, 8});
  HostTensor topk(DType::kI32, {4, 8});
  HostTensor topk_rows(DType::kI32, {3, 8});
  HostTensor packed(DType::kI64, {4, 8});
  const DcpGroup group{2, 1};
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores_bf16.view(), topk.view(), 8, 0, group),
      StatusCode::kInvalidArgument, {"scores", "bf16"}));
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores.view(), topk_rows.view(), 8, 0, group),
      StatusCode::kInvalidArgument, {"local_topk"}));
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores.view(), topk.view(), 9, 0, group),
      StatusCode::kInvalidArgument, {"scores"}));
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores.view(), topk.view(), 8, 2, group),
      StatusCode::kInvalidArgument, {"rank=2"}));
  topk.fill<int32_t>(-1);
  topk.at<int32_t>({2, 3}) = -7;
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores.view(), topk.view(), 8, 0, group),
      StatusCode::kInvalidArgument, {"local_topk[2, 3]", "-7"}));
  topk.at<int32_t>({2, 3}) = 1 << 30;
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates_from_scores(packed.view(), scores.view(), topk.view(), 8, 1, group),
      StatusCode::kInvalidArgument, {"local_topk[2, 3]", "int32"}));
}

}  // namespace
}  // namespace fitest
