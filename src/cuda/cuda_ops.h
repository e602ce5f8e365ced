// The CUDA backend's entry points. Arguments arrive validated by src/ops; `stream` is a
// cudaStream_t. Every op is asynchronous on its stream and graph-capturable.
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda {

// out [N, D] f32 = e4m3(values [N, D]) * scales [N] f32.
Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream);

// topk_per_row on CUDA tensors (see flashindexer/topk.h); arguments validated by src/ops.
// Rows are split across CTAs when they are too few to fill the GPU; that needs
// topk_per_row_workspace_size(rows, width, k) bytes of options.workspace (0 otherwise).
Status topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges,
                    int k, bool sorted, const RunOptions& options);
size_t topk_per_row_workspace_size(int64_t rows, int64_t width, int k);

}  // namespace flashindexer::cuda
