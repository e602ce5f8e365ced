// SPDX-License-Identifier: Apache-2.0
// topk_segment_kernel instantiated for fp32 logits, writing or leaving rows without a visible key
// (the fused indexer's fallback runs over an fp32 logits slab); see segment_kernel.cuh.
#include "cuda/topk/segment_kernel.cuh"

namespace flashindexer::cuda::topk {

cudaError_t launch_segment_f32(const Params& params, int64_t rows, EmptyRows empty_rows,
                               cudaStream_t stream) {
  return empty_rows == EmptyRows::kLeave
             ? launch_segment<float, EmptyRows::kLeave>(params, rows, stream)
             : launch_segment<float, EmptyRows::kWrite>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
