// SPDX-License-Identifier: Apache-2.0
// Public scoring entry points: validate, then run on the tensors' device.
#include "flashindexer/logits.h"

#include "api/checks/scoring.h"
#include "api/dispatch.h"
#include "cuda/cuda_ops.h"

namespace flashindexer {

Status mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                  const TensorView& weights, const TensorView& ks, const TensorView& ke,
                  const LogitsOptions& logits_options, const RunOptions& options) {
  ArgCheck check("mqa_logits");
  check.tensor("logits", logits, {DType::kF32}, 2);
  if (!check.ok()) return check.status();
  const ScoringDims dims = check_prefill_scoring(check, q, keys, weights, ks, ke, logits.shape[1]);
  check.dim("logits", logits, 0, dims.rows)
      .stride_at_least("logits", logits, 0, logits.shape[1])
      .on_device("logits", logits, q.values.device);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::mqa_logits(logits, q, keys, weights, ks, ke, logits_options.clean,
                            options.cuda_stream, options.workspace, options.workspace_bytes);
  }
  cpu::mqa_logits(logits, q, keys, weights, ks, ke, logits_options.clean, cpu_threads(options));
  return Status::Ok();
}

size_t mqa_logits_cuda_workspace_size(int64_t rows, int heads, int64_t num_keys) {
  return cuda::mqa_logits_workspace_size(rows, heads, num_keys);
}

Status paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                        const PagedKCache& cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table,
                        const LogitsOptions& logits_options, const RunOptions& options) {
  ArgCheck check("paged_mqa_logits");
  check.tensor("logits", logits, {DType::kF32}, 2);
  if (!check.ok()) return check.status();
  const ScoringDims dims =
      check_paged_scoring(check, q, cache, weights, context_lens, block_table, logits.shape[1]);
  check.dim("logits", logits, 0, dims.rows)
      .stride_at_least("logits", logits, 0, logits.shape[1])
      .on_device("logits", logits, q.values.device);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::paged_mqa_logits(logits, q, cache, weights, context_lens, block_table,
                                  logits_options.clean, options.cuda_stream);
  }
  cpu::paged_mqa_logits(logits, q, cache, weights, context_lens, block_table, logits_options.clean,
                        cpu_threads(options));
  return Status::Ok();
}

}  // namespace flashindexer
