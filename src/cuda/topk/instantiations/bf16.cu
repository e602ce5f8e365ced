// topk_segment_kernel instantiated for bf16 logits (read as their 16-bit patterns); see
// segment_kernel.cuh.
#include "cuda/topk/segment_kernel.cuh"

namespace flashindexer::cuda::topk {

cudaError_t launch_segment_bf16(const Params& params, int64_t rows, cudaStream_t stream) {
  return launch_segment<uint16_t>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
