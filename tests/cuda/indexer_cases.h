// SPDX-License-Identifier: Apache-2.0
// Shared by the CUDA indexer tests (indexer_test.cpp, indexer_args_test.cpp,
// fused_indexer_test.cpp): workspaces sized for either path, and the runs of indexer_prefill /
// indexer_decode (or the fused entry with a forced candidate capacity) against the dense pair.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/heuristics.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/fused_indexer.h"
#include "support/compare.h"
#include "support/cuda.h"

namespace fitest {

// The logits slab indexer_cuda_workspace_size() adds to the top-k scratch.
inline constexpr size_t kRecommendedSlab = flashindexer::heuristics::kDefaultSlabBytes;

// A poisoned device workspace: the recommended size, or room for only `rows` logits rows of
// `width` keys (the op then runs many small batches).
inline DeviceBuffer indexer_workspace(int k, int64_t rows = 0, int64_t width = 0) {
  size_t bytes = indexer_cuda_workspace_size(k);
  if (rows > 0) bytes = bytes - kRecommendedSlab + rows * ((width + 255) / 256 * 256) * 4;
  return poisoned_device_buffer(bytes);
}

// A poisoned device workspace in which the fused path runs `rows` rows per batch (0: the
// recommended size), with `capacity` candidate slots per row (0: the default).
inline DeviceBuffer fused_workspace(int k, int64_t rows, int64_t width, int capacity = 0) {
  const size_t bytes = rows > 0 ? flashindexer::cuda::fused_indexer_workspace_size(
                                      rows, width, k, flashindexer::cuda::FusedConfig{capacity})
                                : indexer_cuda_workspace_size(k);
  return poisoned_device_buffer(bytes);
}

// The workspace for `path` with `rows` rows per batch (0: the recommended size).
inline DeviceBuffer path_workspace(IndexerPath path, int k, int64_t rows, int64_t width) {
  return path == IndexerPath::kFused ? fused_workspace(k, rows, width)
                                     : indexer_workspace(k, rows, width);
}

inline constexpr IndexerPath kPaths[] = {IndexerPath::kDense, IndexerPath::kFused};

inline const char* path_name(IndexerPath path) {
  return path == IndexerPath::kFused ? "fused" : path == IndexerPath::kDense ? "dense" : "auto";
}

// The dense pair's answer, selected on the CPU from the GPU's own logits: what the CUDA indexer
// must return exactly (set; order when sorted).
template <typename DeviceProblem>
inline HostTensor cpu_topk_of_gpu_logits(const DeviceProblem& device, int64_t rows, int64_t width,
                                         const RowRanges& host_ranges, int k, bool sorted) {
  HostTensor logits = poisoned_logits(rows, width);
  DeviceTensor device_logits = to_device(logits);
  const Status scored = device.run(device_logits, true);
  EXPECT_TRUE(scored.ok()) << status_text(scored);
  to_host(logits, device_logits);
  HostTensor expected = poisoned_topk_output(rows, k);
  const Status selected =
      topk_per_row(expected.view(), logits.view(), host_ranges, k, TopKOptions{sorted});
  EXPECT_TRUE(selected.ok()) << status_text(selected);
  return expected;
}

// cpu_topk_of_gpu_logits of a prefill problem over its own rows' ks / ke.
inline HostTensor cpu_topk_of_gpu_logits(const DevicePrefill& device, const PrefillProblem& p,
                                         int k, bool sorted) {
  return cpu_topk_of_gpu_logits(device, p.rows, p.num_keys,
                                RowRanges::prefill(p.ks.view(), p.ke.view()), k, sorted);
}

// The same selection by the dense GPU pair (mqa_logits + topk_per_row on the device).
template <typename DeviceProblem>
inline HostTensor gpu_dense_topk(const DeviceProblem& device, int64_t rows, int64_t width,
                                 const RowRanges& device_ranges, int k, bool sorted) {
  HostTensor logits = poisoned_logits(rows, width);
  DeviceTensor device_logits = to_device(logits);
  EXPECT_TRUE(device.run(device_logits, false).ok());
  HostTensor out = poisoned_topk_output(rows, k);
  DeviceTensor device_out = to_device(out);
  const size_t bytes = topk_per_row_cuda_workspace_size(rows, width, k);
  DeviceBuffer workspace(bytes);
  const Status status = topk_per_row(device_out.view, device_logits.view, device_ranges, k,
                                     TopKOptions{sorted}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  to_host(out, device_out);
  return out;
}

// The op on `path`; with `capacity` > 0, the fused path's own entry with that many candidate
// slots per row (small inputs then exercise its overflow fallback).
inline HostTensor run_prefill(const DevicePrefill& device, int64_t rows, int k, bool sorted,
                              const DeviceBuffer& workspace, int64_t out_stride,
                              IndexerPath path = IndexerPath::kAuto, int capacity = 0) {
  HostTensor out = poisoned_topk_output(rows, k, out_stride);
  DeviceTensor device_out = to_device(out);
  const Status status =
      capacity > 0
          ? flashindexer::cuda::fused_indexer_prefill(
                device_out.view, device.q.view(), device.keys.view(), device.weights.view,
                device.ks.view, device.ke.view, k, sorted, with_workspace(workspace),
                flashindexer::cuda::FusedConfig{capacity})
          : indexer_prefill(device_out.view, device.q.view(), device.keys.view(),
                            device.weights.view, device.ks.view, device.ke.view, k,
                            TopKOptions{sorted}, IndexerOptions{path}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

inline HostTensor run_decode(const DevicePaged& device, int64_t rows, int k, bool sorted,
                             const DeviceBuffer& workspace, IndexerPath path = IndexerPath::kAuto,
                             int capacity = 0) {
  HostTensor out = poisoned_topk_output(rows, k, k + 3);
  DeviceTensor device_out = to_device(out);
  const Status status =
      capacity > 0
          ? flashindexer::cuda::fused_indexer_decode(
                device_out.view, device.q.view(), device.cache.cache, device.weights.view,
                device.context_lens.view, device.block_table.view, k, sorted,
                with_workspace(workspace), flashindexer::cuda::FusedConfig{capacity})
          : indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                           device.weights.view, device.context_lens.view, device.block_table.view,
                           k, TopKOptions{sorted}, IndexerOptions{path}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

// ----------------------------------------------------------------------------- prefill

}  // namespace fitest
