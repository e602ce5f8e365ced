// topk_segment_kernel instantiated for fp32 logits; see topk_segment_kernel.cuh.
#include "cuda/topk/topk_segment_kernel.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {

cudaError_t launch_segment_f32(const Params& params, int64_t rows, cudaStream_t stream) {
  const size_t shared =
      (kBufferCapacity + static_cast<size_t>(selection_capacity(params.k))) * sizeof(uint64_t);
  // The largest k's footprint, set on every launch (per device, host-side only, capture-safe).
  const int most = (kBufferCapacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  const cudaError_t configured = cudaFuncSetAttribute(
      topk_segment_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  topk_segment_kernel<float>
      <<<dim3(static_cast<unsigned>(rows), params.splits), kThreads, shared, stream>>>(params);
  return cudaGetLastError();
}

}  // namespace flashindexer::cuda::topk
