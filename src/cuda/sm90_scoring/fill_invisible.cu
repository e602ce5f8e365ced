// SPDX-License-Identifier: Apache-2.0
// Clean logits: -inf at every column of a row outside its visible range. The scoring kernel
// writes only visible columns, so the two never touch the same element.
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/row_range.cuh"

namespace flashindexer::cuda::scoring {
namespace {

constexpr int kFillThreads = 256;

template <bool kPaged>
__global__ void __launch_bounds__(kFillThreads) fill_invisible_kernel(const ScoreParams p) {
  const int64_t row = blockIdx.x;
  int32_t first = 0;
  int32_t last = 0;
  row_range<kPaged>(p, row, first, last);
  float* out = p.logits + row * p.logits_stride;
  const float minus_inf = -INFINITY;
  for (int64_t c = threadIdx.x; c < first; c += kFillThreads) out[c] = minus_inf;
  for (int64_t c = last + threadIdx.x; c < p.width; c += kFillThreads) out[c] = minus_inf;
}

}  // namespace

cudaError_t launch_fill_invisible(const ScoreParams& params, bool paged, cudaStream_t stream) {
  if (params.rows == 0 || params.width == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(params.rows));
  if (paged) {
    fill_invisible_kernel<true><<<grid, kFillThreads, 0, stream>>>(params);
  } else {
    fill_invisible_kernel<false><<<grid, kFillThreads, 0, stream>>>(params);
  }
  return cudaGetLastError();
}

}  // namespace flashindexer::cuda::scoring
