// SPDX-License-Identifier: Apache-2.0
// Public multi-GPU building blocks (flashindexer/dist.h): validate, then run on the tensors'
// device (the DCP pack and merge; the TP row-sharding plan is host-side only).
#include "flashindexer/dist.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "api/checks/topk.h"
#include "api/dispatch.h"
#include "core/access.h"
#include "cuda/dcp/dcp.h"

namespace flashindexer {
namespace {

void check_group(ArgCheck& check, const DcpGroup& group) {
  check.require(group.ranks >= 1, "ranks=", group.ranks, ", expected >= 1")
      .require(group.interleave >= 1, "interleave=", group.interleave, ", expected >= 1");
}

void check_k(ArgCheck& check, int k) {
  check.require(k >= 1 && k <= kMaxDcpTopK,
                k < 1 ? concat("k=", k, " is below the minimum 1")
                      : concat("k=", k, " exceeds the maximum ", kMaxDcpTopK));
}

// Local indices are -1 or visible columns, and their global ids fit the i32 output.
void check_local_indices(ArgCheck& check, const TensorView& logits, const TensorView& local_topk,
                         const TensorView& row_starts, int k, int rank, const DcpGroup& group) {
  const int64_t width = logits.shape[1];
  for (int64_t t = 0; t < logits.shape[0] && check.ok(); ++t) {
    const int64_t row_start = row_starts.defined() ? *element<int32_t>(row_starts, t) : 0;
    check.require(row_start >= 0 && row_start <= width, "row_starts entry ", t, " is ", row_start,
                  ", expected 0 <= row_start <= ", width);
    for (int i = 0; i < k && check.ok(); ++i) {
      const int64_t local = *element<int32_t>(local_topk, t, i);
      if (local == -1) continue;
      check.require(local >= 0 && row_start + local < width, "local_topk[", t, ", ", i, "] is ",
                    local, ", expected -1 or a local index in [0, ", width - row_start,
                    ") (logits width ", width, ", row start ", row_start, ")");
      if (!check.ok()) break;
      const int64_t global_id = dcp_global(local, rank, group);
      check.require(global_id <= INT32_MAX, "local_topk[", t, ", ", i, "] is ", local,
                    ", whose global id ", global_id, " on rank ", rank, " does not fit in int32");
    }
  }
}

}  // namespace

Status dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                           const TensorView& local_topk, const TensorView& row_starts, int k,
                           int rank, const DcpGroup& group, const RunOptions& options) {
  ArgCheck check("dcp_pack_candidates");
  check_group(check, group);
  check.require(rank >= 0 && rank < group.ranks, "rank=", rank,
                ", expected 0 <= rank < ranks=", group.ranks);
  check_k(check, k);
  check.tensor("logits", logits, {DType::kF32, DType::kBF16}, 2);
  if (!check.ok()) return check.status();
  const int64_t rows = logits.shape[0];
  check.tensor("local_topk", local_topk, {DType::kI32}, 2)
      .dim("local_topk", local_topk, 0, rows)
      .dim_at_least("local_topk", local_topk, 1, k)
      .tensor("candidates", candidates, {DType::kI64}, 2)
      .dim("candidates", candidates, 0, rows)
      .dim_at_least("candidates", candidates, 1, k)
      .optional_tensor("row_starts", row_starts, {DType::kI32}, 1);
  if (check.ok()) check.stride_at_least("candidates", candidates, 0, k);
  if (check.ok() && row_starts.defined()) check.dim("row_starts", row_starts, 0, rows);
  check.on_device("local_topk", local_topk, logits.device)
      .on_device("candidates", candidates, logits.device);
  if (row_starts.defined()) check.on_device("row_starts", row_starts, logits.device);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    // The index values live on the device: not checked here (a sync), made safe in the kernel.
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::dcp_pack_candidates(candidates, logits, local_topk, row_starts, k, rank, group,
                                     options.cuda_stream);
  }
  check_local_indices(check, logits, local_topk, row_starts, k, rank, group);
  if (!check.ok()) return check.status();
  cpu::dcp_pack_candidates(candidates, logits, local_topk, row_starts, k, rank, group,
                           cpu_threads(options));
  return Status::Ok();
}

Status dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                       const TensorView& local_topk, int k, int rank,
                                       const DcpGroup& group, const RunOptions& options) {
  ArgCheck check("dcp_pack_candidates_from_scores");
  check_group(check, group);
  check.require(rank >= 0 && rank < group.ranks, "rank=", rank,
                ", expected 0 <= rank < ranks=", group.ranks);
  check_k(check, k);
  check.tensor("scores", scores, {DType::kF32}, 2);
  if (!check.ok()) return check.status();
  const int64_t rows = scores.shape[0];
  check.dim_at_least("scores", scores, 1, k)
      .tensor("local_topk", local_topk, {DType::kI32}, 2)
      .dim("local_topk", local_topk, 0, rows)
      .dim_at_least("local_topk", local_topk, 1, k)
      .tensor("candidates", candidates, {DType::kI64}, 2)
      .dim("candidates", candidates, 0, rows)
      .dim_at_least("candidates", candidates, 1, k);
  if (check.ok()) check.stride_at_least("candidates", candidates, 0, k);
  check.on_device("local_topk", local_topk, scores.device)
      .on_device("candidates", candidates, scores.device);
  if (!check.ok()) return check.status();
  if (scores.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::dcp_pack_candidates_from_scores(candidates, scores, local_topk, k, rank, group,
                                                 options.cuda_stream);
  }
  for (int64_t t = 0; t < rows && check.ok(); ++t) {
    for (int i = 0; i < k && check.ok(); ++i) {
      const int64_t local = *element<int32_t>(local_topk, t, i);
      if (local == -1) continue;
      check.require(local >= 0, "local_topk[", t, ", ", i, "] is ", local,
                    ", expected -1 or a local index >= 0");
      if (!check.ok()) break;
      const int64_t global_id = dcp_global(local, rank, group);
      check.require(global_id <= INT32_MAX, "local_topk[", t, ", ", i, "] is ", local,
                    ", whose global id ", global_id, " on rank ", rank, " does not fit in int32");
    }
  }
  if (!check.ok()) return check.status();
  cpu::dcp_pack_candidates_from_scores(candidates, scores, local_topk, k, rank, group,
                                       cpu_threads(options));
  return Status::Ok();
}

Status dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                      const TopKOptions& topk_options, const RunOptions& options) {
  ArgCheck check("dcp_merge_topk");
  check.require(ranks >= 1, "ranks=", ranks, ", expected >= 1");
  check_k(check, k);
  if (!check.ok()) return check.status();
  if (gathered.rank == 3) {
    check.tensor("gathered", gathered, {DType::kI64}, 3)
        .dim("gathered", gathered, 1, ranks)
        .dim("gathered", gathered, 2, k);
  } else {
    check.tensor("gathered", gathered, {DType::kI64}, 2)
        .dim("gathered", gathered, 1, static_cast<int64_t>(ranks) * k);
  }
  if (!check.ok()) return check.status();
  const int64_t rows = gathered.shape[0];
  check_topk_output(check, out, rows, k);  // k is already known to be in [1, kMaxDcpTopK]
  check.on_device("out", out, gathered.device);
  if (!check.ok()) return check.status();
  if (gathered.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::dcp_merge_topk(out, gathered, k, ranks, topk_options.sorted, options.cuda_stream);
  }
  const int threads = cpu_threads(options);
  return with_cpu_workspace(check.op(), dcp_merge_topk_cpu_workspace_size(ranks, k, threads),
                            options, [&](void* workspace) {
                              cpu::dcp_merge_topk(out, gathered, k, ranks, topk_options.sorted,
                                                  threads, workspace);
                            });
}

size_t dcp_merge_topk_cpu_workspace_size(int ranks, int k, int threads) {
  return static_cast<size_t>(cpu::resolve_threads(threads)) *
         cpu::dcp_merge_thread_workspace_bytes(ranks, k);
}

Status tp_row_shard_plan(const TensorView& sizes, const TensorView& costs, int tp) {
  ArgCheck check("tp_row_shard_plan");
  check.require(tp >= 1, "tp=", tp, ", expected >= 1");
  check.tensor("costs", costs, {DType::kI32, DType::kI64}, 1)
      .tensor("sizes", sizes, {DType::kI32}, 1)
      .dim("sizes", sizes, 0, tp)
      .on_device("costs", costs, Device::kCPU)
      .on_device("sizes", sizes, Device::kCPU);
  if (!check.ok()) return check.status();
  const int64_t rows = costs.shape[0];
  check.require(rows <= INT32_MAX, "costs has ", rows, " rows, expected <= ", INT32_MAX);
  if (!check.ok()) return check.status();
  // Costs are summed in int64: each is at most 2^62 / rows, so no prefix sum overflows.
  const int64_t largest_cost = (int64_t{1} << 62) / std::max<int64_t>(rows, 1);
  std::vector<int64_t> row_costs(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows && check.ok(); ++i) {
    row_costs[i] =
        costs.dtype == DType::kI64 ? *element<int64_t>(costs, i) : *element<int32_t>(costs, i);
    check.require(row_costs[i] >= 0 && row_costs[i] <= largest_cost, "costs entry ", i, " is ",
                  row_costs[i], ", expected 0 <= cost <= ", largest_cost, " (2^62 / rows)");
  }
  if (!check.ok()) return check.status();
  std::vector<int32_t> plan(static_cast<size_t>(tp));
  cpu::tp_row_shard_plan(plan.data(), row_costs.data(), rows, tp);
  for (int j = 0; j < tp; ++j) *element<int32_t>(sizes, j) = plan[j];
  return Status::Ok();
}

Status tp_row_shard_narrow(TpRowWindow* window, const TensorView& sizes, int rank,
                           int64_t first_prefill_row, int64_t chunk_row_start,
                           const TensorView& chunk_ks, const TensorView& chunk_ke) {
  ArgCheck check("tp_row_shard_narrow");
  check.require(window != nullptr, "window is null, expected a TpRowWindow to write");
  check.tensor("sizes", sizes, {DType::kI32}, 1).on_device("sizes", sizes, Device::kCPU);
  if (!check.ok()) return check.status();
  const int64_t tp = sizes.shape[0];
  check.require(tp >= 1, "sizes is empty, expected one entry per TP rank")
      .require(rank >= 0 && rank < tp, "rank=", rank, ", expected 0 <= rank < ", tp,
               " (the length of sizes)")
      .require(first_prefill_row >= 0, "first_prefill_row=", first_prefill_row, ", expected >= 0")
      .require(chunk_row_start >= 0, "chunk_row_start=", chunk_row_start, ", expected >= 0")
      .tensor("chunk_ks", chunk_ks, {DType::kI32}, 1)
      .tensor("chunk_ke", chunk_ke, {DType::kI32}, 1)
      .dim("chunk_ke", chunk_ke, 0, chunk_ks.shape[0])
      .on_device("chunk_ke", chunk_ke, chunk_ks.device);
  if (!check.ok()) return check.status();
  int64_t owned_start = first_prefill_row;
  for (int64_t j = 0; j <= rank && check.ok(); ++j) {
    const int32_t size = *element<int32_t>(sizes, j);
    check.require(size >= 0, "sizes entry ", j, " is ", size, ", expected >= 0");
    if (j < rank) owned_start += size;
  }
  if (!check.ok()) return check.status();
  const int64_t owned_end = owned_start + *element<int32_t>(sizes, rank);
  const int64_t chunk_row_end = chunk_row_start + chunk_ks.shape[0];
  TpRowWindow result;
  result.start = std::max(owned_start, chunk_row_start);
  result.end = std::min(owned_end, chunk_row_end);
  if (result.empty()) {
    result.start = result.end = std::clamp(owned_start, chunk_row_start, chunk_row_end);
  } else {
    const int64_t offset = result.start - chunk_row_start;
    for (TensorView* view : {&result.ks, &result.ke}) {
      *view = view == &result.ks ? chunk_ks : chunk_ke;
      view->data = static_cast<int32_t*>(view->data) + offset * view->stride[0];
      view->shape[0] = result.end - result.start;
    }
  }
  *window = result;
  return Status::Ok();
}

}  // namespace flashindexer
