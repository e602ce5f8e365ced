// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's argument and workspace contracts: a missing or too small workspace, the fused
// path's row arrays and its 2^29-key row limit are refused by name; the workspace carving keeps
// its regions disjoint and aligned. These run without a GPU (host checks before any launch).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "indexer_cases.h"

namespace fitest {
namespace {

TEST(IndexerPrefillCuda, RequiresAWorkspace) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the workspace is checked before anything touches the device.
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 256, 64, 128);
  HostTensor out = poisoned_topk_output(8, 16);
  const Status status = indexer_prefill(
      labelled_cuda(out.view()), labelled_cuda(p.q.view()), labelled_cuda(p.keys.view()),
      labelled_cuda(p.weights.view()), labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()), 16);
  EXPECT_TRUE(IsRejected(status, StatusCode::kWorkspaceTooSmall,
                         {"indexer_prefill", "workspace", "indexer_cuda_workspace_size"}));
}

TEST(IndexerPrefillCuda, FusedPathRequiresRoomForItsRowArrays) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the workspace is carved before anything touches the device. A workspace that
  // holds the dense path's slab for one row but not the fused path's per-row arrays, which lie
  // over it: rows of 9000 keys are gated, and one row's 8192 candidate slots take 64 KiB, more
  // than its 36 KiB of logits.
  FI_SEEDED_RNG(rng);
  const int64_t keys = 9000;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, keys, 64, 128);
  HostTensor out = poisoned_topk_output(8, 512);
  std::vector<uint8_t> host_workspace(indexer_cuda_workspace_size(512) - kRecommendedSlab +
                                      (keys + 255) / 256 * 256 * 4 + 4096);
  RunOptions options;
  options.workspace =
      host_workspace.data() + (16 - reinterpret_cast<uintptr_t>(host_workspace.data()) % 16) % 16;
  options.workspace_bytes = host_workspace.size() - 16;
  // The fused path asked for, or chosen by kAuto for rows the caller says are long.
  for (IndexerPath path : {IndexerPath::kFused, IndexerPath::kAuto}) {
    IndexerOptions indexer_options{path};
    indexer_options.min_row_keys = path == IndexerPath::kAuto
                                       ? flashindexer::heuristics::fused_min_row_keys(
                                             flashindexer::heuristics::kFusedMaxAutoK, false)
                                       : 0;
    const Status status = indexer_prefill(
        labelled_cuda(out.view()), labelled_cuda(p.q.view()), labelled_cuda(p.keys.view()),
        labelled_cuda(p.weights.view()), labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()),
        512, TopKOptions{}, indexer_options, options);
    EXPECT_TRUE(IsRejected(status, StatusCode::kWorkspaceTooSmall,
                           {"indexer_prefill", "workspace", "indexer_cuda_workspace_size"}))
        << path_name(path);
  }
}

TEST(IndexerWorkspace, SlabAndKeptRegionAreDisjointAlignedAndInside) {
  // Host arithmetic only (carve_slab never touches the memory): every workspace size from the
  // minimum up gives a slab of whole row units and a kept region, both 1 KiB aligned, disjoint,
  // inside the workspace, after the top-k scratch; the slab's region holds what the caller lays
  // over it (the fused path's candidates) when that is more than a row unit's logits.
  using flashindexer::cuda::carve_slab;
  using flashindexer::cuda::Slab;
  const int64_t width = 70000;
  const int k = 4096;
  const size_t keep_minimum = 300000;
  // A made-up, 1 KiB-aligned address: carve_slab only does arithmetic on it.
  void* const base = reinterpret_cast<void*>(uintptr_t{1} << 30);
  for (int64_t row_unit : {int64_t{1}, int64_t{3}}) {
    const size_t unit = static_cast<size_t>(row_unit) * (width + 255) / 256 * 256 * 4;
    for (size_t overlay_minimum : {size_t{0}, 2 * unit + 5}) {
      for (size_t extra : {size_t{0}, size_t{777}, size_t{5} << 20, size_t{300} << 20}) {
        SCOPED_TRACE(::testing::Message() << "row unit " << row_unit << ", overlay "
                                          << overlay_minimum << ", extra " << extra);
        RunOptions options;
        options.workspace = static_cast<uint8_t*>(base) + 16;
        options.workspace_bytes = flashindexer::cuda::topk_per_row_workspace_bound(k) + 5120 +
                                  std::max(unit, overlay_minimum) + keep_minimum + extra;
        Slab slab;
        const Status status = carve_slab(
            "test", options, width, k, row_unit, keep_minimum, overlay_minimum,
            [](size_t region) { return region / 2; }, &slab);
        ASSERT_TRUE(status.ok()) << status_text(status);
        const auto begin = reinterpret_cast<uintptr_t>(options.workspace);
        const auto end = begin + options.workspace_bytes;
        const auto slab_begin = reinterpret_cast<uintptr_t>(slab.logits);
        const auto slab_end = slab_begin + static_cast<size_t>(slab.rows) * slab.pitch * 4;
        const auto kept_begin = reinterpret_cast<uintptr_t>(slab.kept);
        const auto kept_end = kept_begin + slab.kept_bytes;
        EXPECT_GE(slab.rows, row_unit);
        EXPECT_EQ(slab.rows % row_unit, 0);
        EXPECT_GE(slab.kept_bytes, keep_minimum);
        EXPECT_GE(slab.logits_bytes, overlay_minimum);
        EXPECT_EQ(slab_begin % 1024, 0u);
        EXPECT_EQ(kept_begin % 1024, 0u);
        EXPECT_GE(slab_begin, begin + flashindexer::cuda::topk_per_row_workspace_bound(k));
        EXPECT_LE(slab_end, slab_begin + slab.logits_bytes);
        EXPECT_LE(slab_begin + slab.logits_bytes, kept_begin);
        EXPECT_LE(kept_end, end);
      }
    }
  }
}

TEST(IndexerDecodeCuda, FusedPathRejectsRowsOfMoreThan2To29Keys) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the fused path checks its rows' width before anything touches the device (its
  // candidate queue holds a key's index in 29 bits). A block table of 2^29 / 64 + 1 pages.
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.batch = 1;
  config.heads = 64;
  DecodeProblem p = make_decode_problem(rng, config);
  HostTensor block_table(DType::kI32, {1, (int64_t{1} << 29) / config.page_size + 1});
  PagedKCache cache = p.cache.cache();
  cache.device = Device::kCUDA;
  HostTensor out = poisoned_topk_output(p.rows(), 16);
  const Status status = indexer_decode(
      labelled_cuda(out.view()), labelled_cuda(p.q.view()), cache, labelled_cuda(p.weights.view()),
      labelled_cuda(p.context_lens.view()), labelled_cuda(block_table.view()), 16, TopKOptions{},
      IndexerOptions{IndexerPath::kFused});
  EXPECT_TRUE(IsRejected(status, StatusCode::kInvalidArgument,
                         {"indexer_decode", "fused path", "2^29 keys", "536870976"}));
}

}  // namespace
}  // namespace fitest
