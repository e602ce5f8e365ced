// SPDX-License-Identifier: Apache-2.0
// Public topk_per_row: validate, then run on the tensors' device.
#include "flashindexer/topk.h"

#include "api/checks/topk.h"
#include "api/dispatch.h"
#include "core/rows.h"
#include "cuda/cuda_ops.h"

namespace flashindexer {
namespace {

void check_row_ranges(ArgCheck& check, const RowRanges& ranges, int64_t rows, int64_t width,
                      Device device) {
  if (ranges.is_prefill()) {
    check.tensor("ks", ranges.ks, {DType::kI32}, 1)
        .dim("ks", ranges.ks, 0, rows)
        .tensor("ke", ranges.ke, {DType::kI32}, 1)
        .dim("ke", ranges.ke, 0, rows)
        .on_device("ks", ranges.ks, device)
        .on_device("ke", ranges.ke, device);
  } else {
    check.require(ranges.next_n >= 1, "next_n=", ranges.next_n, ", expected >= 1");
    const int rank = ranges.lengths.rank == 2 ? 2 : 1;
    check.tensor("lengths", ranges.lengths, {DType::kI32}, rank)
        .on_device("lengths", ranges.lengths, device);
    if (check.ok()) {
      const int64_t described_rows = rank == 2 || ranges.next_n == 1
                                         ? ranges.lengths.numel()
                                         : ranges.lengths.shape[0] * ranges.next_n;
      check.require(described_rows == rows, "lengths has shape ", shape_string(ranges.lengths),
                    " with next_n=", ranges.next_n, ", which describes ", described_rows,
                    " rows, expected ", rows);
    }
  }
  if (!check.ok() || device != Device::kCPU) return;
  if (!ranges.is_prefill()) check_lengths_non_negative(check, "lengths", ranges.lengths);
  for (int64_t r = 0; r < rows && check.ok(); ++r) {
    if (ranges.is_prefill()) {
      const int64_t start = *element<int32_t>(ranges.ks, r);
      const int64_t end = *element<int32_t>(ranges.ke, r);
      check.require(start >= 0 && start <= end && end <= width, "row ", r, " has ks=", start,
                    ", ke=", end, ", expected 0 <= ks <= ke <= ", width);
    } else {
      const int64_t end = rows::decode_row_end(ranges.lengths, ranges.next_n, r);
      check.require(end <= width, "row ", r, " sees ", end, " keys, more than the ", width,
                    " columns of logits");
    }
  }
}

}  // namespace

void check_topk_output(ArgCheck& check, const TensorView& out, int64_t rows, int k) {
  check.require(k >= 1 && k <= kMaxTopK, "k=", k,
                k < 1 ? " is below the minimum 1" : " exceeds the maximum 4096");
  check.tensor("out", out, {DType::kI32}, 2)
      .dim("out", out, 0, rows)
      .dim_at_least("out", out, 1, k);
  if (check.ok()) check.stride_at_least("out", out, 0, k);
}

void check_lengths_non_negative(ArgCheck& check, const char* name, const TensorView& lengths) {
  const int64_t columns = lengths.rank == 2 ? lengths.shape[1] : 1;
  for (int64_t i = 0; i < lengths.numel() && check.ok(); ++i) {
    const int32_t length = lengths.rank == 2 ? *element<int32_t>(lengths, i / columns, i % columns)
                                             : *element<int32_t>(lengths, i);
    check.require(length >= 0, name, " entry ", i, " is ", length,
                  ", expected a non-negative length");
  }
}

Status topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                    const TopKOptions& topk_options, const RunOptions& options) {
  ArgCheck check("topk_per_row");
  check.tensor("logits", logits, {DType::kF32, DType::kBF16}, 2);
  if (!check.ok()) return check.status();
  check.stride_at_least("logits", logits, 0, logits.shape[1]);
  const int64_t rows = logits.shape[0];
  check_topk_output(check, out, rows, k);
  check.on_device("out", out, logits.device);
  check_row_ranges(check, ranges, rows, logits.shape[1], logits.device);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::topk_per_row(out, logits, ranges, k, topk_options.sorted, options);
  }
  const int threads = cpu_threads(options);
  return with_cpu_workspace(
      check.op(), topk_per_row_cpu_workspace_size(k, threads), options, [&](void* workspace) {
        cpu::topk_per_row(out, logits, ranges, k, topk_options.sorted, threads, workspace);
      });
}

size_t topk_per_row_cpu_workspace_size(int k, int threads) {
  return static_cast<size_t>(cpu::resolve_threads(threads)) * cpu::topk_thread_workspace_bytes(k);
}

size_t topk_per_row_cuda_workspace_size(int64_t rows, int64_t width, int k) {
  return cuda::topk_per_row_workspace_size(rows, width, k);
}

}  // namespace flashindexer
