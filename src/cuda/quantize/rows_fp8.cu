// SPDX-License-Identifier: Apache-2.0
// FP8 row quantization (spec §3.2, §2.3) on the GPU: one group of D/8 lanes per pair of rows.
//
// Memory-bound (2 or 4 bytes in, 1 out per value): each lane issues the 16-byte load(s) of both
// its rows at once, the row amax is log2(D/8) shuffles, and each lane stores its eight codes as
// one 8-byte store; lane 0 of the group writes the row's scale (and folded weight). 256 threads
// per block, no loop: a 1M-key insert at D = 128 is 32K blocks. RoPE is a template flag so the
// plain quantizers carry none of its registers.
#include "cuda/quantize/rows.h"
#include "cuda/quantize/rows_launch.cuh"

namespace flashindexer::cuda::quant {
namespace {

template <typename In, int kLanes, bool kVector, bool kRope>
__global__ void __launch_bounds__(kBlockThreads, min_blocks_per_sm<In>(kRope))
    fp8_rows_kernel(const RowJob job) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const int64_t first_row = thread / kLanes * kRowsPerGroup;
  const int lane = static_cast<int>(thread % kLanes);
  if (first_row >= job.rows) return;  // a group's lanes leave together
  const unsigned mask = group_mask<kLanes>();
  RowTarget target[kRowsPerGroup];
  float x[kRowsPerGroup][kLaneValues];
#pragma unroll
  for (int u = 0; u < kRowsPerGroup; ++u) {
    target[u] = row_target(job, first_row + u, job.head_dim, 4, sizeof(float));
    if (target[u].live) {
      load_lane<In, kVector>(x[u], static_cast<const In*>(job.input) +
                                       job.input_rows.offset(first_row + u) + lane * kLaneValues);
    } else {
#pragma unroll
      for (int k = 0; k < kLaneValues; ++k) x[u][k] = 0.0f;
    }
  }
#pragma unroll
  for (int u = 0; u < kRowsPerGroup; ++u) {
    const int64_t row = first_row + u;
    if constexpr (kRope) {
      apply_rope<kLanes>(x[u], job.rope, divide(row, job.rows_per_token), target[u].live, lane,
                         mask);
    }
    const float scale = fp8_row_scale<kLanes>(x[u], job.floor, mask);
    if (!target[u].live) continue;
    store_u64<kVector>(target[u].values + lane * kLaneValues, fp8_codes(x[u], scale));
    if (lane != 0) continue;
    if (target[u].scales != nullptr) {
      if (job.destination.slots != nullptr) {
        store_u32<kVector>(target[u].scales, __float_as_uint(scale));  // 4 bytes of a page
      } else {
        *reinterpret_cast<float*>(target[u].scales) = scale;  // an f32 view's element
      }
    }
    fold_weight(job.weights, row, &scale);  // the query form folds the scale into W
  }
}

// The kernel for launch_rows (rows_launch.cuh).
struct Fp8Rows {
  template <typename In, int kLanes, bool kVector, bool kRope>
  static void launch(const RowJob& job, unsigned blocks, cudaStream_t stream) {
    fp8_rows_kernel<In, kLanes, kVector, kRope><<<blocks, kBlockThreads, 0, stream>>>(job);
  }
};

}  // namespace

Status launch_fp8_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  return launch_rows<Fp8Rows>(job, stream, op);
}

}  // namespace flashindexer::cuda::quant
