// SPDX-License-Identifier: Apache-2.0
// Multi-GPU building blocks (dist.h) on CPU tensors, with simulated ranks: the DCP key mapping,
// pack + all-gather + merge against topk_per_row over the un-sharded rows, and the TP prefill
// row-sharding plan.
#include "flashindexer/dist.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include "core/checks.h"
#include "support/dcp_simulation.h"

namespace fitest {
namespace {

// ---------------------------------------------------------------------------------------------
// DCP mapping

TEST(DistMapping, OwnerLocalGlobalAreInverse) {
  for (int ranks = 1; ranks <= 8; ++ranks) {
    for (int interleave = 1; interleave <= 4; ++interleave) {
      const DcpGroup group{ranks, interleave};
      std::vector<int64_t> next_local(ranks, 0);
      for (int64_t g = 0; g < 600; ++g) {
        const int64_t owner = dcp_owner(g, group);
        ASSERT_GE(owner, 0);
        ASSERT_LT(owner, ranks);
        // Each rank stores its keys in global order, densely: local positions 0, 1, 2, ...
        ASSERT_EQ(dcp_local(g, group), next_local[owner]++)
            << "g=" << g << " N=" << ranks << " I=" << interleave;
        ASSERT_EQ(dcp_global(dcp_local(g, group), owner, group), g);
        // local_len(g + 1, r) counts the keys < g + 1 that rank r stores.
        for (int r = 0; r < ranks; ++r) {
          ASSERT_EQ(dcp_local_len(g + 1, r, group), next_local[r])
              << "length " << g + 1 << " rank " << r << " N=" << ranks << " I=" << interleave;
        }
      }
      for (int r = 0; r < ranks; ++r) EXPECT_EQ(dcp_local_len(0, r, group), 0);
    }
  }
}

TEST(DistMapping, MatchesTheSpecExampleWithInterleaveTwo) {
  // N = 3, I = 2: keys 0 1 | 2 3 | 4 5 | 6 7 | ... go to ranks 0 | 1 | 2 | 0 | ...
  const DcpGroup group{3, 2};
  const int64_t owners[] = {0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2, 0};
  const int64_t locals[] = {0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 4};
  for (int64_t g = 0; g < 13; ++g) {
    EXPECT_EQ(dcp_owner(g, group), owners[g]) << g;
    EXPECT_EQ(dcp_local(g, group), locals[g]) << g;
  }
  EXPECT_EQ(dcp_local_len(13, 0, group), 5);
  EXPECT_EQ(dcp_local_len(13, 1, group), 4);
  EXPECT_EQ(dcp_local_len(13, 2, group), 4);
  EXPECT_EQ(dcp_local_len(3, 2, group), 0);  // an empty shard
}

TEST(DistMapping, UsesSixtyFourBitArithmetic) {
  const DcpGroup group{8, 3};
  const int64_t g = (int64_t{1} << 40) + 12345;
  EXPECT_EQ(dcp_global(dcp_local(g, group), dcp_owner(g, group), group), g);
}

// ---------------------------------------------------------------------------------------------
// DCP merge with simulated ranks

// Merges and compares with the un-sharded top-k: the same ids in the same order when sorted, the
// same set when not.
void check_merge(const DcpSimulation& sim, const DcpCase& c, const TensorView& gathered) {
  for (bool sorted : {true, false}) {
    HostTensor merged = poisoned_topk_output(c.rows, c.k + 3);
    const Status status =
        dcp_merge_topk(merged.view(), gathered, c.k, c.ranks, TopKOptions{sorted});
    ASSERT_TRUE(status.ok()) << status_text(status);
    for (int64_t t = 0; t < c.rows; ++t) {
      ASSERT_TRUE(TopKRowMatches(topk_row(merged, t, c.k), topk_row(sim.expected, t, c.k), sorted))
          << describe(c) << " row " << t << (sorted ? " sorted" : " unsorted");
    }
    EXPECT_TRUE(ColumnsBeyondKUntouched(merged, c.k));
  }
}

TEST(DistDcp, MergeEqualsTopKOverConcatenatedKeys) {
  FI_SEEDED_RNG(rng);
  for (int ranks : {2, 3, 4, 8}) {
    for (int interleave : {1, 2, 3}) {
      for (int k : {1, 64, 512, 2048}) {
        for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
          DcpCase c{ranks, interleave, k, rng.bernoulli(0.5), fill, k >= 512 ? 3 : 6};
          const DcpSimulation sim = simulate_dcp(rng, c);
          check_merge(sim, c, sim.gathered.view());
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(DistDcp, PrefillRowStartsAndDecodeBothExact) {
  FI_SEEDED_RNG(rng);
  for (bool prefill : {false, true}) {
    DcpCase c{4, 2, 64, prefill, Fill::kFewTies, 12};
    const DcpSimulation sim = simulate_dcp(rng, c);
    check_merge(sim, c, sim.gathered.view());
  }
}

TEST(DistDcp, MergeReadsTheNcclAllGatherLayoutWithoutTranspose) {
  FI_SEEDED_RNG(rng);
  for (int ranks : {2, 3, 8}) {
    DcpCase c{ranks, 2, 64, true, Fill::kSpecial, 7};
    const DcpSimulation sim = simulate_dcp(rng, c);
    // [N, rows, k] buffer viewed as [rows, N, k].
    TensorView view = sim.gathered_nccl.view();
    view.shape = {c.rows, c.ranks, c.k, 0};
    view.stride = {c.k, c.rows * c.k, 1, 0};
    check_merge(sim, c, view);
  }
}

TEST(DistDcp, TiesAcrossRanksGoToTheSmallerGlobalId) {
  // Every key scores the same: the global top-k is ids 0 .. k-1, spread over all ranks.
  for (int interleave : {1, 2, 3}) {
    const int ranks = 4, k = 64;
    const int64_t length = 1000;
    const DcpGroup group{ranks, interleave};
    HostTensor gathered(DType::kI64, {1, ranks * k});
    for (int rank = 0; rank < ranks; ++rank) {
      const int64_t local_length = dcp_local_len(length, rank, group);
      HostTensor local(DType::kF32, {1, local_length});
      local.fill<float>(0.5f);
      HostTensor local_topk = poisoned_topk_output(1, k);
      HostTensor lengths = i32_tensor({static_cast<int32_t>(local_length)});
      FI_ASSERT_OK(
          topk_per_row(local_topk.view(), local.view(), RowRanges::decode(lengths.view()), k));
      TensorView packed = gathered.view();
      packed.shape[1] = k;
      packed.data = gathered.data<int64_t>() + rank * k;
      FI_ASSERT_OK(dcp_pack_candidates(packed, local.view(), local_topk.view(), TensorView{}, k,
                                       rank, group));
    }
    HostTensor merged = poisoned_topk_output(1, k);
    FI_ASSERT_OK(dcp_merge_topk(merged.view(), gathered.view(), k, ranks, TopKOptions{true}));
    for (int i = 0; i < k; ++i) EXPECT_EQ(merged.at<int32_t>({0, i}), i) << "I=" << interleave;
  }
}

TEST(DistDcp, NanRanksBelowMinusInfinityAndAboveEmptySlots) {
  // Rank 0 holds a NaN, rank 1 holds -inf; k = 3 of 2 keys: -inf first, then NaN, then -1.
  const DcpGroup group{2, 1};
  HostTensor gathered(DType::kI64, {1, 6});
  const float scores[2] = {bits_float(0x7FC00000u), -kInf};
  for (int rank = 0; rank < 2; ++rank) {
    HostTensor local(DType::kF32, {1, 1});
    local.fill<float>(scores[rank]);
    HostTensor local_topk = i32_tensor({0, -1, -1});
    TensorView topk_view = view_of(local_topk.data<int32_t>(), DType::kI32, {1, 3});
    TensorView packed = view_of(gathered.data<int64_t>() + 3 * rank, DType::kI64, {1, 3});
    FI_ASSERT_OK(
        dcp_pack_candidates(packed, local.view(), topk_view, TensorView{}, 3, rank, group));
  }
  HostTensor merged = poisoned_topk_output(1, 3);
  FI_ASSERT_OK(dcp_merge_topk(merged.view(), gathered.view(), 3, 2, TopKOptions{true}));
  EXPECT_EQ(topk_row(merged, 0, 3), (std::vector<int32_t>{1, 0, -1}));
}

TEST(DistDcp, MergeIsIndependentOfThreadsAndRankOrder) {
  FI_SEEDED_RNG(rng);
  DcpCase c{8, 3, 512, true, Fill::kFewTies, 9};
  const DcpSimulation sim = simulate_dcp(rng, c);
  // The candidate blocks in another order: a merge only sees the set of keys.
  HostTensor reversed(DType::kI64, {c.rows, c.ranks * c.k});
  for (int64_t t = 0; t < c.rows; ++t) {
    for (int r = 0; r < c.ranks; ++r) {
      for (int i = 0; i < c.k; ++i) {
        reversed.at<int64_t>({t, (c.ranks - 1 - r) * c.k + i}) =
            sim.gathered.at<int64_t>({t, r * c.k + i});
      }
    }
  }
  HostTensor first = poisoned_topk_output(c.rows, c.k);
  RunOptions one_thread;
  one_thread.cpu_threads = 1;
  FI_ASSERT_OK(dcp_merge_topk(first.view(), sim.gathered.view(), c.k, c.ranks, {}, one_thread));
  for (int threads : {2, 5}) {
    RunOptions options;
    options.cpu_threads = threads;
    std::vector<uint64_t> workspace(dcp_merge_topk_cpu_workspace_size(c.ranks, c.k, threads) / 8);
    options.workspace = workspace.data();
    options.workspace_bytes = workspace.size() * 8;
    HostTensor again = poisoned_topk_output(c.rows, c.k);
    FI_ASSERT_OK(dcp_merge_topk(again.view(), reversed.view(), c.k, c.ranks, {}, options));
    for (int64_t t = 0; t < c.rows; ++t) {
      EXPECT_TRUE(TopKRowMatches(topk_row(again, t, c.k), topk_row(sim.expected, t, c.k), false));
      EXPECT_TRUE(TopKRowMatches(topk_row(first, t, c.k), topk_row(sim.expected, t, c.k), false));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// DCP argument checks

struct DcpArgs {
  HostTensor candidates{DType::kI64, {2, 4}};
  HostTensor logits{DType::kF32, {2, 10}};
  HostTensor local_topk{DType::kI32, {2, 4}};
  HostTensor gathered{DType::kI64, {2, 8}};
  HostTensor merged{DType::kI32, {2, 4}};
  int k = 4;
  int rank = 1;
  DcpGroup group{2, 1};
  DcpArgs() { local_topk.fill<int32_t>(-1); }
  Status pack() const {
    return dcp_pack_candidates(candidates.view(), logits.view(), local_topk.view(), TensorView{}, k,
                               rank, group);
  }
  Status merge() const { return dcp_merge_topk(merged.view(), gathered.view(), k, group.ranks); }
};

TEST(DistDcp, AcceptsTheValidArguments) {
  DcpArgs a;
  FI_EXPECT_OK(a.pack());
  FI_EXPECT_OK(a.merge());
}

TEST(DistDcp, RejectsRanksBelowOne) {
  DcpArgs a;
  a.group.ranks = 0;
  a.rank = 0;
  EXPECT_TRUE(
      IsRejected(a.pack(), StatusCode::kInvalidArgument, {"dcp_pack_candidates", "ranks=0"}));
  EXPECT_TRUE(IsRejected(a.merge(), StatusCode::kInvalidArgument, {"dcp_merge_topk", "ranks=0"}));
}

TEST(DistDcp, RejectsRankOutsideTheGroup) {
  DcpArgs a;
  a.rank = 2;
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"rank=2"}));
  a.rank = -1;
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"rank=-1"}));
}

TEST(DistDcp, RejectsInterleaveBelowOne) {
  DcpArgs a;
  a.group.interleave = 0;
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"interleave=0"}));
}

TEST(DistDcp, RejectsKAboveTheMaximum) {
  DcpArgs a;
  a.k = 2049;
  a.candidates = HostTensor(DType::kI64, {2, 2049});
  a.local_topk = HostTensor(DType::kI32, {2, 2049});
  a.gathered = HostTensor(DType::kI64, {2, 2 * 2049});
  a.merged = HostTensor(DType::kI32, {2, 2049});
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"k=2049", "2048"}));
  EXPECT_TRUE(IsRejected(a.merge(), StatusCode::kInvalidArgument, {"k=2049", "2048"}));
  a.k = 0;
  EXPECT_TRUE(IsRejected(a.merge(), StatusCode::kInvalidArgument, {"k=0"}));
}

TEST(DistDcp, RejectsShapeMismatches) {
  {
    DcpArgs a;
    a.local_topk = HostTensor(DType::kI32, {3, 4});
    EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"local_topk"}));
  }
  {
    DcpArgs a;
    a.candidates = HostTensor(DType::kI64, {2, 3});
    EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"candidates"}));
  }
  {
    DcpArgs a;
    a.candidates = HostTensor(DType::kI32, {2, 4});
    EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"candidates", "i64"}));
  }
  {
    DcpArgs a;
    a.gathered = HostTensor(DType::kI64, {2, 7});
    EXPECT_TRUE(IsRejected(a.merge(), StatusCode::kInvalidArgument, {"gathered"}));
  }
  {
    DcpArgs a;
    a.merged = HostTensor(DType::kI32, {3, 4});
    EXPECT_TRUE(IsRejected(a.merge(), StatusCode::kInvalidArgument, {"out"}));
  }
  {
    DcpArgs a;
    HostTensor starts = i32_tensor({0, 1, 2});
    EXPECT_TRUE(
        IsRejected(dcp_pack_candidates(a.candidates.view(), a.logits.view(), a.local_topk.view(),
                                       starts.view(), a.k, a.rank, a.group),
                   StatusCode::kInvalidArgument, {"row_starts"}));
  }
}

TEST(DistDcp, RejectsLocalIndexOutsideTheRow) {
  DcpArgs a;
  a.local_topk.at<int32_t>({1, 2}) = 10;
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"local_topk[1, 2]"}));
  a.local_topk.at<int32_t>({1, 2}) = -2;
  EXPECT_TRUE(IsRejected(a.pack(), StatusCode::kInvalidArgument, {"local_topk[1, 2]"}));
  // With a row start of 7 only local indices < 3 are inside the 10 columns.
  a.local_topk.at<int32_t>({1, 2}) = 3;
  HostTensor starts = i32_tensor({0, 7});
  EXPECT_TRUE(
      IsRejected(dcp_pack_candidates(a.candidates.view(), a.logits.view(), a.local_topk.view(),
                                     starts.view(), a.k, a.rank, a.group),
                 StatusCode::kInvalidArgument, {"local_topk[1, 2]"}));
}

// ---------------------------------------------------------------------------------------------
// TP row sharding

std::vector<int32_t> plan(const std::vector<int64_t>& costs, int tp) {
  HostTensor cost_tensor(DType::kI64, {static_cast<int64_t>(costs.size())});
  std::copy(costs.begin(), costs.end(), cost_tensor.data<int64_t>());
  HostTensor sizes(DType::kI32, {tp});
  const Status status = tp_row_shard_plan(sizes.view(), cost_tensor.view(), tp);
  EXPECT_TRUE(status.ok()) << status_text(status);
  return std::vector<int32_t>(sizes.data<int32_t>(), sizes.data<int32_t>() + tp);
}

int64_t max_window_cost(const std::vector<int64_t>& costs, const std::vector<int32_t>& sizes) {
  int64_t begin = 0, worst = 0;
  for (int32_t size : sizes) {
    worst = std::max(
        worst, std::accumulate(costs.begin() + begin, costs.begin() + begin + size, int64_t{0}));
    begin += size;
  }
  return worst;
}

std::vector<int32_t> equal_split(int64_t rows, int tp) {
  std::vector<int32_t> sizes(tp);
  for (int j = 0; j < tp; ++j) sizes[j] = static_cast<int32_t>(rows / tp + (j < rows % tp));
  return sizes;
}

// Causal prefill costs: requests of seq_len S with query_len M, row j of a request scoring
// S - M + 1 + j keys.
std::vector<int64_t> prefill_costs(Rng& rng, int64_t target_rows) {
  std::vector<int64_t> costs;
  while (static_cast<int64_t>(costs.size()) < target_rows) {
    const int64_t query_len = rng.uniform_int(1, 2048);
    const int64_t context = rng.bernoulli(0.5) ? 0 : rng.uniform_int(0, 60000);
    for (int64_t j = 0; j < query_len; ++j) costs.push_back(context + 1 + j);
  }
  return costs;
}

void expect_valid_plan(const std::vector<int32_t>& sizes, int64_t rows, int tp) {
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), rows);
  for (int j = 0; j < tp; ++j) EXPECT_GE(sizes[j], rows >= tp ? 1 : (j < rows ? 1 : 0)) << j;
}

TEST(DistRowShard, BalancesLargePrefillBatches) {
  FI_SEEDED_RNG(rng);
  for (int tp : {2, 3, 4, 8}) {
    for (int repeat = 0; repeat < 5; ++repeat) {
      const std::vector<int64_t> costs = prefill_costs(rng, 8192);
      const int64_t rows = static_cast<int64_t>(costs.size());
      const std::vector<int32_t> sizes = plan(costs, tp);
      expect_valid_plan(sizes, rows, tp);
      const double mean =
          static_cast<double>(std::accumulate(costs.begin(), costs.end(), int64_t{0})) / tp;
      const int64_t worst = max_window_cost(costs, sizes);
      EXPECT_LE(worst / mean, 1.02) << "tp=" << tp << " rows=" << rows;
      EXPECT_LE(worst, max_window_cost(costs, equal_split(rows, tp))) << "tp=" << tp;
    }
  }
}

TEST(DistRowShard, IsOptimalAndNeverWorseThanTheEqualSplit) {
  FI_SEEDED_RNG(rng);
  for (int repeat = 0; repeat < 300; ++repeat) {
    const int tp = static_cast<int>(rng.uniform_int(1, 4));
    const int64_t rows = rng.uniform_int(tp, 9);
    std::vector<int64_t> costs(rows);
    for (int64_t& cost : costs) cost = rng.bernoulli(0.2) ? 0 : rng.uniform_int(1, 1000);
    const std::vector<int32_t> sizes = plan(costs, tp);
    expect_valid_plan(sizes, rows, tp);
    // Brute force: every split into tp non-empty contiguous windows.
    int64_t best = INT64_MAX;
    std::vector<int32_t> trial(tp, 1);
    std::function<void(int, int64_t)> search = [&](int j, int64_t left) {
      if (j == tp - 1) {
        trial[j] = static_cast<int32_t>(left);
        best = std::min(best, max_window_cost(costs, trial));
        return;
      }
      for (int64_t size = 1; size <= left - (tp - 1 - j); ++size) {
        trial[j] = static_cast<int32_t>(size);
        search(j + 1, left - size);
      }
    };
    search(0, rows);
    ASSERT_EQ(max_window_cost(costs, sizes), best) << "tp=" << tp << " rows=" << rows;
    ASSERT_LE(best, max_window_cost(costs, equal_split(rows, tp)));
  }
}

TEST(DistRowShard, FewerRowsThanRanksGiveOneRowToTheFirstRanks) {
  EXPECT_EQ(plan({5, 7}, 4), (std::vector<int32_t>{1, 1, 0, 0}));
  EXPECT_EQ(plan({}, 3), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ(plan({1, 2, 3}, 1), (std::vector<int32_t>{3}));
}

TEST(DistRowShard, EveryRankGetsARowEvenWhenOneRowDominates) {
  const std::vector<int64_t> costs = {1, 1, 1000000, 1, 1, 1, 1};
  const std::vector<int32_t> sizes = plan(costs, 4);
  expect_valid_plan(sizes, 7, 4);
  EXPECT_EQ(max_window_cost(costs, sizes), 1000000);
}

TEST(DistRowShard, NarrowGivesEachChunkRowToExactlyOneRank) {
  // 5 decode rows, then 9 prefill rows split 3 / 2 / 4; chunks of rows [5, 9), [9, 10), [10, 14).
  HostTensor sizes = i32_tensor({3, 2, 4});
  const int64_t chunks[][2] = {{5, 9}, {9, 10}, {10, 14}};
  for (const auto& chunk : chunks) {
    const int64_t chunk_rows = chunk[1] - chunk[0];
    HostTensor ks(DType::kI32, {chunk_rows}), ke(DType::kI32, {chunk_rows});
    for (int64_t i = 0; i < chunk_rows; ++i) {
      ks.data<int32_t>()[i] = static_cast<int32_t>(100 + chunk[0] + i);
      ke.data<int32_t>()[i] = static_cast<int32_t>(200 + chunk[0] + i);
    }
    std::vector<int> owner(chunk_rows, -1);
    for (int rank = 0; rank < 3; ++rank) {
      TpRowWindow window;
      FI_ASSERT_OK(
          tp_row_shard_narrow(&window, sizes.view(), rank, 5, chunk[0], ks.view(), ke.view()));
      const int64_t owned_start = 5 + (rank == 0 ? 0 : rank == 1 ? 3 : 5);
      const int64_t owned_end = owned_start + sizes.data<int32_t>()[rank];
      EXPECT_EQ(window.start, window.empty() ? window.start : std::max(owned_start, chunk[0]));
      EXPECT_EQ(window.empty(), std::max(owned_start, chunk[0]) >= std::min(owned_end, chunk[1]));
      if (window.empty()) {
        EXPECT_FALSE(window.ks.defined());
        continue;
      }
      ASSERT_EQ(window.ks.shape[0], window.end - window.start);
      for (int64_t row = window.start; row < window.end; ++row) {
        EXPECT_EQ(owner[row - chunk[0]], -1) << "row " << row << " has two owners";
        owner[row - chunk[0]] = rank;
        EXPECT_EQ(window.ks.ptr<int32_t>()[row - window.start], 100 + row);
        EXPECT_EQ(window.ke.ptr<int32_t>()[row - window.start], 200 + row);
      }
    }
    for (int64_t i = 0; i < chunk_rows; ++i) EXPECT_NE(owner[i], -1) << "row " << chunk[0] + i;
  }
}

TEST(DistRowShard, RejectsBadArguments) {
  HostTensor costs(DType::kI64, {4});
  costs.fill<int64_t>(3);
  HostTensor sizes(DType::kI32, {2});
  EXPECT_TRUE(IsRejected(tp_row_shard_plan(sizes.view(), costs.view(), 0),
                         StatusCode::kInvalidArgument, {"tp=0"}));
  EXPECT_TRUE(IsRejected(tp_row_shard_plan(sizes.view(), costs.view(), 3),
                         StatusCode::kInvalidArgument, {"sizes"}));
  costs.data<int64_t>()[2] = -1;
  EXPECT_TRUE(IsRejected(tp_row_shard_plan(sizes.view(), costs.view(), 2),
                         StatusCode::kInvalidArgument, {"costs entry 2"}));
  HostTensor ks = i32_tensor({0, 0}), ke = i32_tensor({1, 1});
  HostTensor plan_sizes = i32_tensor({1, 1});
  TpRowWindow window;
  EXPECT_TRUE(
      IsRejected(tp_row_shard_narrow(&window, plan_sizes.view(), 2, 0, 0, ks.view(), ke.view()),
                 StatusCode::kInvalidArgument, {"rank=2"}));
  HostTensor short_ke = i32_tensor({1});
  EXPECT_TRUE(IsRejected(
      tp_row_shard_narrow(&window, plan_sizes.view(), 0, 0, 0, ks.view(), short_ke.view()),
      StatusCode::kInvalidArgument, {"chunk_ke"}));
}

}  // namespace
}  // namespace fitest
