// SPDX-License-Identifier: Apache-2.0
// Host side of the GPU top-k: plan the splits from shapes only, check the workspace, launch.
//
// Nothing here reads row lengths (they live on the device): the only host decision is how many
// CTAs share a row, from rows, width, k, the SM count and (clusters) how many clusters the GPU
// holds at once, so the op is graph-capturable, never synchronizes and never allocates. Rows
// enough to fill the GPU (>= 2 CTAs per SM) get one CTA each. Fewer rows are cut into segments
// of at least 8192 keys: for k <= kClusterMaxK, one thread-block cluster per row (up to 8 CTAs)
// selects in one launch without workspace; for larger k, up to 16 segment CTAs (splits x k <=
// 16384 so the merge holds every candidate in shared memory) hand their candidates to a merge
// kernel through the workspace.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/cuda_ops.h"
#include "cuda/topk/config.h"
#include "cuda/topk/params.h"

namespace flashindexer::cuda {
namespace {

constexpr size_t kWorkspaceAlignment = 256;

// The split rule is launch geometry that follows from config.h (CTAs per SM, the merge's and the
// cluster's shared-memory capacities, the shortest segment worth a merge), not a crossover
// measured between two paths, so it stays here rather than in core/heuristics.h.
int plan_splits(int64_t rows, int64_t width, int k, int sms) {
  if (rows <= 0 || width <= topk::kMinSegment) return 1;
  const int64_t target_ctas = static_cast<int64_t>(topk::kMinCtasPerSm) * sms;
  // Rounded down: one wave of CTAs (ceil would start a second, partial wave: 64 rows x 5 = 320
  // CTAs > 264 slots).
  int64_t splits = target_ctas / rows;
  splits = std::min<int64_t>(splits, topk::kMaxSplits);
  splits = std::min<int64_t>(splits, topk::kMergeCapacity / k);
  splits = std::min<int64_t>(splits, (width + topk::kMinSegment - 1) / topk::kMinSegment);
  return static_cast<int>(std::max<int64_t>(splits, 1));
}

size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Keys per split slot: the merge's shared buffer divided among the splits (>= k, since
// plan_splits keeps splits x k <= kMergeCapacity).
int split_capacity(int splits) { return topk::kMergeCapacity / splits; }

size_t split_keys_bytes(int64_t rows, int splits) {
  return align_up(static_cast<size_t>(rows) * splits * split_capacity(splits) * sizeof(uint64_t));
}

// Split rows with a small k run as clusters (no workspace); larger k as segments + merge.
bool uses_cluster(int splits, int k) { return splits > 1 && k <= topk::kClusterMaxK; }

size_t workspace_bytes(int64_t rows, int splits, int k) {
  if (splits <= 1 || uses_cluster(splits, k)) return 0;
  return split_keys_bytes(rows, splits) +
         align_up(static_cast<size_t>(rows) * splits * sizeof(int32_t));
}

}  // namespace

namespace topk {

Params make_params(const TensorView& out, const RowRanges& ranges, int64_t width, int k,
                   bool sorted) {
  Params params{};
  params.width = width;
  params.out = out.ptr<int32_t>();
  params.out_stride0 = out.stride[0];
  params.out_stride1 = out.stride[1];
  if (ranges.is_prefill()) {
    params.ks = ranges.ks.ptr<int32_t>();
    params.ks_stride = ranges.ks.stride[0];
    params.ke = ranges.ke.ptr<int32_t>();
    params.ke_stride = ranges.ke.stride[0];
  } else {
    params.lengths = ranges.lengths.ptr<int32_t>();
    params.lengths_stride0 = ranges.lengths.stride[0];
    if (ranges.lengths.rank == 2) {
      params.lengths_stride1 = ranges.lengths.stride[1];
      params.lengths_columns = static_cast<int>(ranges.lengths.shape[1]);
    }
  }
  params.next_n = ranges.next_n;
  params.k = k;
  params.splits = 1;
  params.sorted = sorted ? 1 : 0;
  return params;
}

}  // namespace topk

size_t topk_per_row_workspace_bound(int k) {
  if (k <= topk::kClusterMaxK) return 0;
  // Split rows satisfy rows x splits <= the CTA target with splits >= 2 (plan_splits rounds
  // down), and a row's slots hold at most kMergeCapacity keys, so this covers any shape.
  const int64_t target_ctas = static_cast<int64_t>(topk::kMinCtasPerSm) * multiprocessor_count();
  return align_up(static_cast<size_t>(target_ctas / 2) * topk::kMergeCapacity * sizeof(uint64_t)) +
         align_up(static_cast<size_t>(target_ctas) * sizeof(int32_t));
}

size_t topk_per_row_workspace_size(int64_t rows, int64_t width, int k) {
  if (rows <= 0 || width <= 0 || k < 1) return 0;
  return workspace_bytes(rows, plan_splits(rows, width, k, multiprocessor_count()), k);
}

namespace topk {

Status per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
               bool sorted, const RunOptions& options, EmptyRows empty_rows) {
  const char* op = "topk_per_row";
  const int64_t rows = logits.shape[0];
  const int64_t width = logits.shape[1];
  if (rows == 0) return Status::Ok();
  const int splits = plan_splits(rows, width, k, multiprocessor_count());
  const size_t needed = workspace_bytes(rows, splits, k);
  if (needed > 0) {
    if (options.workspace == nullptr || options.workspace_bytes < needed) {
      return Status::WorkspaceTooSmall(
          concat(op, ": CUDA logits with ", rows, " rows x ", width, " columns and k=", k,
                 " split rows across CTAs and need a workspace of ", needed,
                 " bytes (topk_per_row_cuda_workspace_size); RunOptions.workspace has ",
                 options.workspace == nullptr ? 0 : options.workspace_bytes, " bytes"));
    }
    if (reinterpret_cast<uintptr_t>(options.workspace) % 16 != 0) {
      return Status::InvalidArgument(
          concat(op, ": RunOptions.workspace must be 16-byte aligned for CUDA tensors"));
    }
  }

  Params params = make_params(out, ranges, width, k, sorted);
  params.logits = logits.data;
  params.logits_stride = logits.stride[0];
  params.k = k;
  params.splits = splits;
  params.sorted = sorted ? 1 : 0;
  if (needed > 0) {
    auto* base = static_cast<unsigned char*>(options.workspace);
    params.split_capacity = split_capacity(splits);
    params.split_keys = reinterpret_cast<uint64_t*>(base);
    params.split_counts = reinterpret_cast<int32_t*>(base + split_keys_bytes(rows, splits));
  }

  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  if (uses_cluster(splits, k)) {
    return to_status(launch_cluster(params, rows, logits.dtype == DType::kBF16, empty_rows, stream),
                     op, "cluster kernel launch");
  }
  const cudaError_t launched = logits.dtype == DType::kBF16
                                   ? launch_segment_bf16(params, rows, empty_rows, stream)
                                   : launch_segment_f32(params, rows, empty_rows, stream);
  if (Status status = to_status(launched, op, "segment kernel launch"); !status.ok()) {
    return status;
  }
  if (splits > 1) {
    return to_status(launch_merge(params, rows, logits.dtype == DType::kBF16, empty_rows, stream),
                     op, "merge kernel launch");
  }
  return Status::Ok();
}

}  // namespace topk

Status topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                    bool sorted, const RunOptions& options) {
  return topk::per_row(out, logits, ranges, k, sorted, options, topk::EmptyRows::kWrite);
}

}  // namespace flashindexer::cuda
