// SPDX-License-Identifier: Apache-2.0
// Public query quantizer entry points: validate, then run on the tensors' device.
#include "flashindexer/query.h"

#include <cmath>

#include "api/dispatch.h"
#include "api/rope.h"
#include "cuda/cuda_ops.h"
#include "flashindexer/formats.h"

namespace flashindexer {
namespace {

// q [T, H, D] f32/bf16 (D 64 or 128), weights [T, H] f32/bf16, weights_out [T, H] f32, the RoPE
// options; returns the options with the weight scale resolved.
QueryQuantOptions check_query_inputs(ArgCheck& check, const TensorView& weights_out,
                                     const TensorView& q, const TensorView& weights,
                                     const QueryQuantOptions& quant) {
  check.tensor("q", q, {DType::kF32, DType::kBF16}, 3)
      .tensor("weights", weights, {DType::kF32, DType::kBF16}, 2)
      .tensor("weights_out", weights_out, {DType::kF32}, 2);
  if (!check.ok()) return quant;
  const int64_t tokens = q.shape[0];
  const int64_t heads = q.shape[1];
  const int64_t head_dim = q.shape[2];
  check
      .require(head_dim == 64 || head_dim == 128, "q has head dim D=", head_dim,
               ", expected 64 or 128")
      .dim("weights", weights, 0, tokens)
      .dim("weights", weights, 1, heads)
      .dim("weights_out", weights_out, 0, tokens)
      .dim("weights_out", weights_out, 1, heads)
      .on_device("weights", weights, q.device)
      .on_device("weights_out", weights_out, q.device)
      .require(std::isfinite(quant.weight_scale), "weight_scale=", quant.weight_scale,
               " is not finite");
  check_rope(check, quant.rope, head_dim, tokens, q.device);
  if (!check.ok()) return quant;
  QueryQuantOptions resolved = quant;
  if (resolved.weight_scale == 0.0f) {
    resolved.weight_scale =
        default_query_weight_scale(static_cast<int>(head_dim), static_cast<int>(heads));
  }
  if (q.device == Device::kCPU && quant.rope.enabled()) {
    for (int64_t t = 0; t < tokens && check.ok(); ++t) check_rope_position(check, quant.rope, t);
  }
  return resolved;
}

}  // namespace

float default_query_weight_scale(int head_dim, int heads) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim) * heads));
}

Status quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                          const TensorView& q, const TensorView& weights,
                          const QueryQuantOptions& quant, const RunOptions& options) {
  ArgCheck check("quantize_query_fp8");
  check.require(quant.eps > 0.0f && std::isfinite(quant.eps), "eps=", quant.eps,
                ", expected a positive floor (1e-10 for DeepSeek-V3.2, 1e-4 for V4)");
  const QueryQuantOptions resolved = check_query_inputs(check, weights_out, q, weights, quant);
  check.tensor("values", values, {DType::kE4M3}, 3);
  if (!check.ok()) return check.status();
  for (int d = 0; d < 3; ++d) check.dim("values", values, d, q.shape[d]);
  check.on_device("values", values, q.device);
  if (!check.ok()) return check.status();
  if (q.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::quantize_query_fp8(values, weights_out, q, weights, resolved, options.cuda_stream);
  }
  cpu::quantize_query_fp8(values, weights_out, q, weights, resolved, cpu_threads(options));
  return Status::Ok();
}

Status quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                            const TensorView& weights_out, const TensorView& q,
                            const TensorView& weights, const QueryQuantOptions& quant,
                            const RunOptions& options) {
  ArgCheck check("quantize_query_mxfp4");
  const QueryQuantOptions resolved = check_query_inputs(check, weights_out, q, weights, quant);
  check.tensor("values", values, {DType::kE2M1x2}, 3).tensor("scales", scales, {DType::kUE8M0}, 3);
  if (!check.ok()) return check.status();
  for (int d = 0; d < 2; ++d) {
    check.dim("values", values, d, q.shape[d]).dim("scales", scales, d, q.shape[d]);
  }
  check.dim("values", values, 2, q.shape[2] / 2)
      .dim("scales", scales, 2, q.shape[2] / kMxfp4BlockSize)
      .on_device("values", values, q.device)
      .on_device("scales", scales, q.device);
  if (!check.ok()) return check.status();
  if (q.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::quantize_query_mxfp4(values, scales, weights_out, q, weights, resolved,
                                      options.cuda_stream);
  }
  cpu::quantize_query_mxfp4(values, scales, weights_out, q, weights, resolved,
                            cpu_threads(options));
  return Status::Ok();
}

}  // namespace flashindexer
