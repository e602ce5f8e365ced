// SPDX-License-Identifier: Apache-2.0
// topk_segment_kernel instantiated for bf16 logits (read as their 16-bit patterns); see
// segment_kernel.cuh. Every row is written: only the fused indexer's fallback leaves rows, and
// its logits are fp32.
#include "cuda/topk/segment_kernel.cuh"

namespace flashindexer::cuda::topk {

cudaError_t launch_segment_bf16(const Params& params, int64_t rows, EmptyRows empty_rows,
                                cudaStream_t stream) {
  if (empty_rows != EmptyRows::kWrite) return cudaErrorNotSupported;
  return launch_segment<uint16_t, EmptyRows::kWrite>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
