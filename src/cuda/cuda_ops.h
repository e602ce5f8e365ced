// The CUDA backend's entry points. Arguments arrive validated by src/ops; `stream` is a
// cudaStream_t. Every op is asynchronous on its stream and graph-capturable.
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

// out [N, D] f32 = e4m3(values [N, D]) * scales [N] f32.
Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream);

}  // namespace flashindexer::cuda
