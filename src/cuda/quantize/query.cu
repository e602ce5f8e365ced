// SPDX-License-Identifier: Apache-2.0
// quantize_query_fp8 / quantize_query_mxfp4 on CUDA tensors: the (token, head) rows of q
// through the row kernels, RoPE at the token's position before, the weight fold after.
#include "cuda/cuda_ops.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda {
namespace {

quant::RowJob query_job(const TensorView& q, const TensorView& weights,
                        const TensorView& weights_out, const QueryQuantOptions& quant_options) {
  quant::RowJob job;
  job.input = q.data;
  job.input_bf16 = q.dtype == DType::kBF16;
  job.input_rows = quant::rows_of(q);
  job.rows = q.shape[0] * q.shape[1];
  job.head_dim = static_cast<int>(q.shape[2]);
  job.rows_per_token = q.shape[1];
  job.floor = quant_options.eps;
  job.rope = quant::rope_of(quant_options.rope, job.head_dim);
  quant::WeightFold& fold = job.weights;
  fold.weights = weights.data;
  fold.weights_bf16 = weights.dtype == DType::kBF16;
  fold.weight_rows = quant::rows_with(weights.shape[1], weights.stride[0], 1);
  fold.weights_out = weights_out.ptr<float>();
  fold.weights_out_rows = quant::rows_with(weights_out.shape[1], weights_out.stride[0], 1);
  fold.weight_scale = quant_options.weight_scale;
  return job;
}

}  // namespace

Status quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                          const TensorView& q, const TensorView& weights,
                          const QueryQuantOptions& quant_options, void* stream) {
  quant::RowJob job = query_job(q, weights, weights_out, quant_options);
  job.destination.values = values.ptr<uint8_t>();
  job.destination.value_rows = quant::rows_of(values);
  job.vector = quant::rows_aligned(q, 16) && quant::rows_aligned(values, 8);
  return quant::launch_fp8_rows(job, static_cast<cudaStream_t>(stream), "quantize_query_fp8");
}

Status quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                            const TensorView& weights_out, const TensorView& q,
                            const TensorView& weights, const QueryQuantOptions& quant_options,
                            void* stream) {
  quant::RowJob job = query_job(q, weights, weights_out, quant_options);
  job.destination.values = values.ptr<uint8_t>();
  job.destination.value_rows = quant::rows_of(values);
  job.destination.scales = scales.data;
  job.destination.scale_rows = quant::rows_of(scales);
  job.vector = quant::rows_aligned(q, 16) && quant::rows_aligned(values, 4);
  return quant::launch_mxfp4_rows(job, static_cast<cudaStream_t>(stream), "quantize_query_mxfp4");
}

}  // namespace flashindexer::cuda
