// SPDX-License-Identifier: Apache-2.0
// DCP after a CUDA indexer that returns its selected scores (dist.h,
// dcp_pack_candidates_from_scores): the CUDA pack from scores == the CPU pack from the logits bit
// for bit (NaN, +-inf, +-0, ties), and the whole GPU flow -- per-rank indexer with scores on the
// dense and the fused path, pack from scores, merge -- gives the logits flow's candidates (GPU
// mqa_logits + topk_per_row + dcp_pack_candidates) and the un-sharded indexer's answer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "indexer_cases.h"
#include "support/dcp_indexer.h"
#include "support/dcp_simulation.h"
#include "support/indexer_outputs.h"

namespace fitest {
namespace {

TEST(DcpFromScoresCuda, PackFromScoresEqualsTheCpuPackFromLogits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
    for (int k : {1, 512, 2048}) {
      const DcpCase c{static_cast<int>(rng.uniform_int(1, 8)),
                      static_cast<int>(rng.uniform_int(1, 3)),
                      k,
                      rng.bernoulli(0.5),
                      fill,
                      k >= 512 ? 3 : 9};
      SCOPED_TRACE(describe(c));
      DcpSimulation sim = simulate_dcp(rng, c);
      for (int rank = 0; rank < c.ranks; ++rank) {
        const DcpRankInputs& in = sim.ranks[rank];
        HostTensor scores = poisoned_scores(c.rows, c.k);
        for (int64_t t = 0; t < c.rows; ++t) {
          const int64_t start = c.prefill ? in.row_starts.data<int32_t>()[t] : 0;
          for (int i = 0; i < c.k; ++i) {
            const int32_t l = in.local_topk.at<int32_t>({t, i});
            if (l >= 0) scores.at<float>({t, i}) = in.logits.at<float>({t, start + l});
          }
        }
        HostTensor packed(DType::kI64, {c.rows, c.k + 1});
        packed.fill<int64_t>(0x5A5A5A5A5A5A5A5A);
        DeviceTensor device_packed = to_device(packed);
        const DeviceTensor device_scores = to_device(scores);
        const DeviceTensor device_topk = to_device(in.local_topk);
        FI_ASSERT_OK(dcp_pack_candidates_from_scores(device_packed.view, device_scores.view,
                                                     device_topk.view, c.k, rank,
                                                     DcpGroup{c.ranks, c.interleave}));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(packed, device_packed);
        for (int64_t t = 0; t < c.rows; ++t) {
          for (int i = 0; i < c.k; ++i) {
            ASSERT_EQ(packed.at<int64_t>({t, i}), in.packed.at<int64_t>({t, i}))
                << "rank " << rank << " row " << t << " slot " << i;
          }
          ASSERT_EQ(packed.at<int64_t>({t, c.k}), int64_t{0x5A5A5A5A5A5A5A5A});
        }
      }
    }
  }
}

// A [rows, N k] i64 buffer's block of rank r: columns [r k, (r + 1) k).
TensorView rank_block(const DeviceTensor& gathered, int rank, int k) {
  TensorView block = gathered.view;
  block.data = static_cast<int64_t*>(block.data) + static_cast<int64_t>(rank) * k;
  block.shape[1] = k;
  return block;
}

TEST(DcpFromScoresCuda, IndexerFlowOnEveryPathEqualsTheLogitsFlowAndTheUnshardedIndexer) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 4; ++trial) {
    const DcpGroup group{static_cast<int>(rng.uniform_int(2, 4)), trial == 3 ? 2 : 1};
    const int k = static_cast<int>(rng.pick(std::vector<int64_t>{64, 512, 2048}));
    const int heads = trial % 2 == 0 ? 64 : 32;
    const int64_t rows = rng.uniform_int(4, 24);
    const int64_t num_keys = rng.uniform_int(8000, 60000);
    SCOPED_TRACE(::testing::Message()
                 << "N=" << group.ranks << " I=" << group.interleave << " k=" << k << " H=" << heads
                 << " rows=" << rows << " keys=" << num_keys);
    PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, num_keys, heads, 128);
    zero_keys(rng, p.keys, KFormat::kFP8, 128, num_keys, num_keys / 10);
    huge_weights(rng, p.weights, 1);
    for (int64_t t = 0; t < rows; ++t) {
      p.ks.data<int32_t>()[t] = 0;
      p.ke.data<int32_t>()[t] = static_cast<int32_t>(rng.uniform_int(0, num_keys));
    }
    const DevicePrefill global(p);
    const HostTensor expected = cpu_topk_of_gpu_logits(global, p, k, true);
    const HostTensor empty(DType::kI64, {rows, group.ranks * static_cast<int64_t>(k)});
    for (IndexerPath path : kPaths) {
      SCOPED_TRACE(path_name(path));
      DeviceTensor from_scores = to_device(empty);
      DeviceTensor from_logits = to_device(empty);
      for (int rank = 0; rank < group.ranks; ++rank) {
        PrefillProblem local;
        local.format = KFormat::kFP8;
        local.heads = heads;
        local.head_dim = 128;
        local.rows = rows;
        local.keys = shard_keys(p.keys, KFormat::kFP8, 128, num_keys, rank, group);
        local.num_keys = local.keys.values.size(0);
        local.q = Operand{copy_tensor(p.q.values), HostTensor()};
        local.weights = copy_tensor(p.weights);
        local.ks = copy_tensor(p.ks);
        local.ke = local_row_ends(p.ke, rank, group);
        const DevicePrefill device(local);
        // Scores flow.
        HostTensor local_topk = poisoned_topk_output(rows, k);
        HostTensor scores = poisoned_scores(rows, k);
        DeviceTensor device_topk = to_device(local_topk);
        DeviceTensor device_scores = to_device(scores);
        const DeviceBuffer workspace = path_workspace(path, k, 0, local.num_keys);
        IndexerOptions o;
        o.path = path;
        o.scores = device_scores.view;
        FI_ASSERT_OK(indexer_prefill(device_topk.view, device.q.view(), device.keys.view(),
                                     device.weights.view, device.ks.view, device.ke.view, k,
                                     TopKOptions{false}, o, with_workspace(workspace)));
        FI_ASSERT_OK(dcp_pack_candidates_from_scores(rank_block(from_scores, rank, k),
                                                     device_scores.view, device_topk.view, k, rank,
                                                     group));
        // Logits flow, all on the GPU.
        HostTensor logits = poisoned_logits(rows, local.num_keys);
        DeviceTensor device_logits = to_device(logits);
        FI_ASSERT_OK(device.run(device_logits, false));
        HostTensor logits_topk = poisoned_topk_output(rows, k);
        DeviceTensor device_logits_topk = to_device(logits_topk);
        const DeviceBuffer topk_workspace(
            topk_per_row_cuda_workspace_size(rows, local.num_keys, k));
        FI_ASSERT_OK(topk_per_row(device_logits_topk.view, device_logits.view,
                                  RowRanges::prefill(device.ks.view, device.ke.view), k,
                                  TopKOptions{false}, with_workspace(topk_workspace)));
        FI_ASSERT_OK(dcp_pack_candidates(rank_block(from_logits, rank, k), device_logits.view,
                                         device_logits_topk.view, device.ks.view, k, rank, group));
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      HostTensor packed_scores(DType::kI64, {rows, group.ranks * static_cast<int64_t>(k)});
      HostTensor packed_logits(DType::kI64, {rows, group.ranks * static_cast<int64_t>(k)});
      to_host(packed_scores, from_scores);
      to_host(packed_logits, from_logits);
      ASSERT_EQ(
          std::memcmp(packed_scores.bytes(), packed_logits.bytes(), packed_scores.byte_size()), 0)
          << "the candidates packed from the scores differ from those packed from the logits";
      HostTensor merged = poisoned_topk_output(rows, k);
      DeviceTensor device_merged = to_device(merged);
      FI_ASSERT_OK(
          dcp_merge_topk(device_merged.view, from_scores.view, k, group.ranks, TopKOptions{true}));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      to_host(merged, device_merged);
      EXPECT_TRUE(SameTopK(merged, expected, k, true));
    }
  }
}

}  // namespace
}  // namespace fitest
