// SPDX-License-Identifier: Apache-2.0
// indexer_prefill / indexer_decode on CUDA tensors, on both paths (dense and fused): equal to the
// dense GPU pair topk_per_row(mqa_logits) / topk_per_row(paged_mqa_logits), and to the CPU
// selection over the same GPU logits, for any workspace size (batches of rows); bit-identical
// repeats; graph capture.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "indexer_cases.h"

namespace fitest {
namespace {

TEST(IndexerPrefillCuda, EqualsTheDensePairForAnyWorkspace) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int k : {1, 100, 512, 2048}) {
      const int64_t rows = rng.uniform_int(60, 190);
      const int64_t keys = rng.uniform_int(2500, 9000);
      const bool sorted = index % 2 == 0;
      const bool ties = index % 3 == 0;
      ++index;
      SCOPED_TRACE(::testing::Message()
                   << "H=" << heads << " k=" << k << " rows=" << rows << " keys=" << keys
                   << " sorted=" << sorted << " ties=" << ties);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
      if (ties) add_ties(rng, p.keys, {KFormat::kFP8, heads, 128}, keys);
      const DevicePrefill device(p);
      const RowRanges host_ranges = RowRanges::prefill(p.ks.view(), p.ke.view());
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, rows, keys, host_ranges, k, sorted);
      const HostTensor dense = gpu_dense_topk(
          device, rows, keys, RowRanges::prefill(device.ks.view, device.ke.view), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      // Batches of 5 rows (not a whole scoring group), then the recommended workspace.
      for (IndexerPath path : kPaths) {
        for (int64_t batch_rows : {int64_t{5}, int64_t{0}}) {
          SCOPED_TRACE(::testing::Message() << path_name(path) << ", batch rows " << batch_rows);
          const DeviceBuffer workspace = path_workspace(path, k, batch_rows, keys);
          const HostTensor got = run_prefill(device, rows, k, sorted, workspace, k + 5, path);
          EXPECT_TRUE(SameTopK(got, expected, k, sorted));
          // Unsorted too, the same bits as the dense pair over all rows (ascending indices).
          EXPECT_TRUE(SameTopK(got, dense, k, true));
        }
      }
    }
  }
}

// Multi-request chunk (causal suffixes of two requests) with one long request's worth of keys.
TEST(IndexerPrefillCuda, MultiRequestChunkEqualsTheCpuSelection) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 300;
  const int64_t keys = 70000;
  const int k = 2048;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 64, 128);
  for (int64_t t = 0; t < rows; ++t) {
    const bool second = t >= rows / 2;
    p.ks.data<int32_t>()[t] = second ? 20001 : 0;
    p.ke.data<int32_t>()[t] = static_cast<int32_t>(second ? keys - rows + t + 1 : 19000 + t);
  }
  const DevicePrefill device(p);
  const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, true);
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, k, 64, keys);
    EXPECT_TRUE(
        SameTopK(run_prefill(device, rows, k, true, workspace, k, path), expected, k, true));
  }
}

TEST(IndexerPrefillCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  // 30000 keys: the fused path gates its rows (more keys than its 8192 candidate slots).
  const int64_t keys = 30000;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 97, keys, 64, 128);
  add_ties(rng, p.keys, {KFormat::kFP8, 64, 128}, keys);
  const DevicePrefill device(p);
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, 512, 13, keys);
    const HostTensor first = run_prefill(device, 97, 512, false, workspace, 512, path);
    for (int run = 1; run < 20; ++run) {
      const HostTensor again = run_prefill(device, 97, 512, false, workspace, 512, path);
      ASSERT_EQ(std::memcmp(again.bytes(), first.bytes(), first.byte_size()), 0)
          << "run " << run << " differs";
    }
  }
}

TEST(IndexerDecodeCuda, EqualsTheDensePairForAnyWorkspace) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      DecodeConfig config;
      config.heads = index % 2 == 0 ? 64 : 32;
      config.next_n = next_n;
      config.two_dim_lens = two_dim;
      config.batch = index % 3 == 0 ? 1 : 37;
      config.page_size = std::vector<int>{32, 64, 128}[index % 3];
      config.max_len = index % 3 == 0 ? 40000 : 3000;
      const int k = std::vector<int>{2048, 512, 64, 1024}[index % 4];
      const bool sorted = index % 2 == 1;
      ++index;
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      const DevicePaged device(p);
      const RowRanges host_ranges = RowRanges::decode(p.context_lens.view(), next_n);
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, p.rows(), p.width, host_ranges, k, sorted);
      const HostTensor dense =
          gpu_dense_topk(device, p.rows(), p.width,
                         RowRanges::decode(device.context_lens.view, next_n), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      const int64_t table_width = p.block_table.size(1) * config.page_size;
      // One request per batch, then the recommended workspace.
      for (IndexerPath path : kPaths) {
        for (int64_t batch_rows : {int64_t{next_n}, int64_t{0}}) {
          SCOPED_TRACE(::testing::Message() << path_name(path) << ", batch rows " << batch_rows);
          const DeviceBuffer workspace = path_workspace(path, k, batch_rows, table_width);
          const HostTensor got = run_decode(device, p.rows(), k, sorted, workspace, path);
          EXPECT_TRUE(SameTopK(got, expected, k, sorted));
          // Unsorted too, the same bits as the dense pair over all rows (ascending indices).
          EXPECT_TRUE(SameTopK(got, dense, k, true));
        }
      }
    }
  }
}

TEST(IndexerDecodeCuda, GraphReplayGivesTheSameIndices) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.heads = 64;
  config.batch = 5;
  config.next_n = 2;
  config.max_len = 20000;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged device(p);
  const int k = 2048;
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, k, 4, p.block_table.size(1) * 64);
    const HostTensor direct = run_decode(device, p.rows(), k, false, workspace, path);

    HostTensor replayed = poisoned_topk_output(p.rows(), k, k + 3);
    DeviceTensor device_out = to_device(replayed);
    CapturedGraph graph;
    FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
      return indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                            device.weights.view, device.context_lens.view, device.block_table.view,
                            k, TopKOptions{}, IndexerOptions{path},
                            with_workspace(workspace, stream));
    }));
    ASSERT_EQ(graph.replay(3), cudaSuccess);
    to_host(replayed, device_out);
    EXPECT_EQ(std::memcmp(replayed.bytes(), direct.bytes(), direct.byte_size()), 0);
  }
}

}  // namespace
}  // namespace fitest
