// SPDX-License-Identifier: Apache-2.0
// apply_candidate_mask on CUDA (vLLM's mask, candidates.h), in place.
//
// One CTA per (row, window of kWindowColumns columns): it first flags, in a shared bitmap, the
// row's blocks that overlap its window and are named by a candidate (every CTA of the row reads
// the row's C candidates, from L2 after the first), and the edge flag; then it writes -inf to every
// column of the window that is not kept. The bitmap covers kWindowColumns / cb + 2 blocks, so
// shared memory stays small whatever the row width.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/candidates/candidates.h"
#include "cuda/candidates/mask.cuh"
#include "cuda/candidates/rows.cuh"
#include "cuda/common/check.h"

namespace flashindexer::cuda {
namespace candidates {
namespace {

constexpr int kMaskThreads = 256;
constexpr int64_t kWindowColumns = kMaskWindowColumns;
// Blocks a window can overlap (cb = 1 is the worst case), as 32-bit bitmap words.
constexpr int kBitmapWords = static_cast<int>((kWindowColumns + 2 + 31) / 32);

__global__ void __launch_bounds__(kMaskThreads)
    mask_kernel(float* logits, int64_t logits_stride, int64_t width, BoundRows rows,
                const int32_t* candidates, int64_t candidate_stride, int num_candidates,
                int block_size) {
  __shared__ uint32_t flags[kBitmapWords];
  __shared__ int edge;
  const int64_t t = blockIdx.x;
  const int64_t window_start = blockIdx.y * kWindowColumns;
  const int64_t window_end = min(window_start + kWindowColumns, width);
  const int64_t ks = rows.ks_of(t);
  const Visible vis = visible_of(rows, t, width);
  // Blocks of the row whose columns meet this window: [first_block, first_block + kBitmapWords*32).
  const int64_t first_block =
      window_start > vis.start ? (window_start - vis.start) / block_size : 0;
  for (int i = threadIdx.x; i < kBitmapWords; i += kMaskThreads) flags[i] = 0;
  if (threadIdx.x == 0) edge = 0;
  __syncthreads();
  const int32_t* row_candidates = candidates + t * candidate_stride;
  for (int i = threadIdx.x; i < num_candidates; i += kMaskThreads) {
    const int64_t c = row_candidates[i];
    if (c < 0) continue;
    if (ks + c * block_size >= width) {
      edge = 1;
    } else if (c >= first_block && c - first_block < int64_t{kBitmapWords} * 32) {
      const int64_t bit = c - first_block;
      atomicOr(&flags[bit / 32], 1u << (bit % 32));
    }
  }
  __syncthreads();
  float* row = logits + t * logits_stride;
  for (int64_t col = window_start + threadIdx.x; col < window_end; col += kMaskThreads) {
    bool keep = false;
    if (col >= vis.start && col < vis.start + vis.count) {
      const int64_t bit = (col - vis.start) / block_size - first_block;
      keep = ((flags[bit / 32] >> (bit % 32)) & 1u) != 0 || (col == width - 1 && edge != 0);
    }
    if (!keep) row[col] = -INFINITY;
  }
}

}  // namespace

cudaError_t launch_mask(float* logits, int64_t logits_stride, int64_t rows, int64_t width,
                        const BoundRows& bounds, const int32_t* candidates,
                        int64_t candidate_stride, int num_candidates, int block_size,
                        cudaStream_t stream) {
  if (rows == 0 || width == 0) return cudaSuccess;
  const int64_t windows = (width + kWindowColumns - 1) / kWindowColumns;
  mask_kernel<<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(windows)), kMaskThreads, 0,
                stream>>>(logits, logits_stride, width, bounds, candidates, candidate_stride,
                          num_candidates, block_size);
  return cudaGetLastError();
}

}  // namespace candidates

Status apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                            const TensorView& candidates, int block_size, void* stream) {
  const int64_t width = logits.shape[1];
  if ((width + candidates::kMaskWindowColumns - 1) / candidates::kMaskWindowColumns > 65535) {
    return Status::Unsupported(concat("apply_candidate_mask: logits of ", width,
                                      " columns exceed the CUDA mask's ",
                                      int64_t{65535} * candidates::kMaskWindowColumns));
  }
  return to_status(
      candidates::launch_mask(logits.ptr<float>(), logits.stride[0], logits.shape[0], width,
                              candidates::bound_rows_of(rows), candidates.ptr<const int32_t>(),
                              candidates.stride[0], static_cast<int>(candidates.shape[1]),
                              block_size, static_cast<cudaStream_t>(stream)),
      "apply_candidate_mask", "kernel launch");
}

}  // namespace flashindexer::cuda
