// topk_segment_kernel instantiated for fp32 logits; see segment_kernel.cuh.
#include "cuda/topk/segment_kernel.cuh"

namespace flashindexer::cuda::topk {

cudaError_t launch_segment_f32(const Params& params, int64_t rows, cudaStream_t stream) {
  return launch_segment<float>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
