// SPDX-License-Identifier: Apache-2.0
// The mask kernel's launch, shared by apply_candidate_mask and the vLLM-compatible consumer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/candidates/rows.cuh"

namespace flashindexer::cuda::candidates {

// Columns per CTA of the mask kernel (the grid's y extent is width / this, at most 65535).
inline constexpr int64_t kMaskWindowColumns = 4096;

cudaError_t launch_mask(float* logits, int64_t logits_stride, int64_t rows, int64_t width,
                        const BoundRows& bounds, const int32_t* candidates,
                        int64_t candidate_stride, int num_candidates, int block_size,
                        cudaStream_t stream);

}  // namespace flashindexer::cuda::candidates
