// SPDX-License-Identifier: Apache-2.0
// quantize_k_fp8 and quantize_mxfp4 on CUDA tensors: a view's rows through the row kernels.
#include "core/checks.h"
#include "cuda/cuda_ops.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda {
namespace {

Status unsupported_dim(const char* op, int64_t head_dim) {
  return Status::Unsupported(concat(op,
                                    ": CUDA tensors take rows of 32, 64, 128 or 256 values, got ",
                                    head_dim, "; pass CPU tensors for other lengths"));
}

quant::RowJob rows_job(const TensorView& input) {
  quant::RowJob job;
  job.input = input.data;
  job.input_bf16 = input.dtype == DType::kBF16;
  job.input_rows = quant::rows_of(input);
  job.rows = quant::outer_rows_of(input);
  job.head_dim = static_cast<int>(input.shape[input.rank - 1]);
  return job;
}

}  // namespace

Status quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                      void* stream) {
  const char* op = "quantize_k_fp8";
  if (!quant::head_dim_supported(input.shape[1])) return unsupported_dim(op, input.shape[1]);
  quant::RowJob job = rows_job(input);
  job.destination.values = values.ptr<uint8_t>();
  job.destination.value_rows = quant::rows_of(values);
  job.destination.scales = scales.data;
  job.destination.scale_rows = quant::rows_of(scales);
  job.vector = quant::rows_aligned(input, 16) && quant::rows_aligned(values, 8);
  return quant::launch_fp8_rows(job, static_cast<cudaStream_t>(stream), op);
}

Status quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                      void* stream) {
  const char* op = "quantize_mxfp4";
  const int64_t head_dim = input.shape[input.rank - 1];
  if (!quant::head_dim_supported(head_dim)) return unsupported_dim(op, head_dim);
  quant::RowJob job = rows_job(input);
  job.destination.values = values.ptr<uint8_t>();
  job.destination.value_rows = quant::rows_of(values);
  job.destination.scales = scales.data;
  job.destination.scale_rows = quant::rows_of(scales);
  job.vector = quant::rows_aligned(input, 16) && quant::rows_aligned(values, 4);
  return quant::launch_mxfp4_rows(job, static_cast<cudaStream_t>(stream), op);
}

}  // namespace flashindexer::cuda
