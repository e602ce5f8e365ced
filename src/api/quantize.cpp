// SPDX-License-Identifier: Apache-2.0
// Public quantizer entry points: validate, then run on the tensors' device.
#include "flashindexer/quantize.h"

#include "api/dispatch.h"
#include "cuda/cuda_ops.h"
#include "flashindexer/formats.h"

namespace flashindexer {
namespace {

constexpr int64_t kMaxRowLength = 1024;

// values [N, D] e4m3 and scales [N] f32 beside a [N, D] float tensor called `dense_name`.
void check_fp8_pair(ArgCheck& check, const TensorView& values, const TensorView& scales,
                    const TensorView& dense, const char* dense_name,
                    std::initializer_list<DType> dense_dtypes) {
  check.tensor(dense_name, dense, dense_dtypes, 2)
      .tensor("values", values, {DType::kE4M3}, 2)
      .tensor("scales", scales, {DType::kF32}, 1);
  if (!check.ok()) return;
  check.dim("values", values, 0, dense.shape[0])
      .dim("values", values, 1, dense.shape[1])
      .dim("scales", scales, 0, dense.shape[0])
      .require(dense.shape[1] <= kMaxRowLength, dense_name, " rows have ", dense.shape[1],
               " values, at most ", kMaxRowLength, " are supported")
      .on_device("values", values, dense.device)
      .on_device("scales", scales, dense.device);
}

// values [..., D/2] e2m1x2 and scales [..., D/32] ue8m0 beside a [..., D] float tensor.
void check_mxfp4_pair(ArgCheck& check, const TensorView& values, const TensorView& scales,
                      const TensorView& dense, const char* dense_name,
                      std::initializer_list<DType> dense_dtypes) {
  const int rank = dense.rank;
  check.require(rank == 2 || rank == 3, dense_name, " has rank ", rank, ", expected 2 or 3");
  if (!check.ok()) return;
  check.tensor(dense_name, dense, dense_dtypes, rank)
      .tensor("values", values, {DType::kE2M1x2}, rank)
      .tensor("scales", scales, {DType::kUE8M0}, rank);
  if (!check.ok()) return;
  const int64_t length = dense.shape[rank - 1];
  check.require(length % kMxfp4BlockSize == 0 && length <= kMaxRowLength, dense_name, " rows have ",
                length, " values, expected a multiple of 32 up to ", kMaxRowLength);
  for (int d = 0; d + 1 < rank; ++d) {
    check.dim("values", values, d, dense.shape[d]).dim("scales", scales, d, dense.shape[d]);
  }
  check.dim("values", values, rank - 1, length / 2)
      .dim("scales", scales, rank - 1, length / kMxfp4BlockSize)
      .on_device("values", values, dense.device)
      .on_device("scales", scales, dense.device);
}

}  // namespace

Status quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                      const RunOptions& options) {
  ArgCheck check("quantize_k_fp8");
  check_fp8_pair(check, values, scales, input, "input", {DType::kF32, DType::kBF16});
  if (!check.ok()) return check.status();
  if (input.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::quantize_k_fp8(values, scales, input, options.cuda_stream);
  }
  cpu::quantize_k_fp8(values, scales, input, cpu_threads(options));
  return Status::Ok();
}

Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        const RunOptions& options) {
  ArgCheck check("dequantize_k_fp8");
  check_fp8_pair(check, values, scales, out, "out", {DType::kF32});
  if (!check.ok()) return check.status();
  if (out.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::dequantize_k_fp8(out, values, scales, options.cuda_stream);
  }
  cpu::dequantize_k_fp8(out, values, scales, cpu_threads(options));
  return Status::Ok();
}

Status quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                      const RunOptions& options) {
  ArgCheck check("quantize_mxfp4");
  check_mxfp4_pair(check, values, scales, input, "input", {DType::kF32, DType::kBF16});
  if (!check.ok()) return check.status();
  if (input.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::quantize_mxfp4(values, scales, input, options.cuda_stream);
  }
  cpu::quantize_mxfp4(values, scales, input, cpu_threads(options));
  return Status::Ok();
}

Status dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                        const RunOptions& options) {
  ArgCheck check("dequantize_mxfp4");
  check_mxfp4_pair(check, values, scales, out, "out", {DType::kF32});
  if (!check.ok()) return check.status();
  if (out.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::dequantize_mxfp4(out, values, scales, options.cuda_stream);
  }
  cpu::dequantize_mxfp4(out, values, scales, cpu_threads(options));
  return Status::Ok();
}

}  // namespace flashindexer
