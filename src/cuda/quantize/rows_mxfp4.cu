// SPDX-License-Identifier: Apache-2.0
// MXFP4 row quantization (spec §3.3, §2.4) on the GPU: one group of D/8 lanes per pair of rows,
// four lanes per block of 32 values.
//
// Each lane loads its eight values of both rows (16-byte loads, issued together), the block amax
// is two shuffles among the block's four lanes, and each lane stores its four packed bytes as
// one 4-byte store; the first lane of a block writes the block's scale byte. The launch is
// rows_fp8.cu's (rows_launch.cuh).
#include "cuda/quantize/rows.h"
#include "cuda/quantize/rows_launch.cuh"

namespace flashindexer::cuda::quant {
namespace {

constexpr int kLanesPerBlock = kMxfp4BlockSize / kLaneValues;

template <typename In, int kLanes, bool kVector, bool kRope>
__global__ void __launch_bounds__(kBlockThreads, min_blocks_per_sm<In>(kRope))
    mxfp4_rows_kernel(const RowJob job) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const int64_t first_row = thread / kLanes * kRowsPerGroup;
  const int lane = static_cast<int>(thread % kLanes);
  if (first_row >= job.rows) return;  // a group's lanes leave together
  const unsigned mask = group_mask<kLanes>();
  const int value_bytes = job.head_dim / 2;
  const int scale_count = job.head_dim / kMxfp4BlockSize;
  RowTarget target[kRowsPerGroup];
  float x[kRowsPerGroup][kLaneValues];
#pragma unroll
  for (int u = 0; u < kRowsPerGroup; ++u) {
    target[u] = row_target(job, first_row + u, value_bytes, scale_count, 1);
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
    uint32_t scale_byte;
    const uint32_t word = mxfp4_codes(x[u], mask, &scale_byte);
    if (!target[u].live) continue;
    store_u32<kVector>(target[u].values + lane * (kLaneValues / 2), word);
    if (lane % kLanesPerBlock == 0) {
      target[u].scales[lane / kLanesPerBlock] = static_cast<uint8_t>(scale_byte);
    }
    if (lane == 0) fold_weight(job.weights, row, nullptr);  // MXFP4 weights are not q-scaled
  }
}

// The kernel for launch_rows (rows_launch.cuh).
struct Mxfp4Rows {
  template <typename In, int kLanes, bool kVector, bool kRope>
  static void launch(const RowJob& job, unsigned blocks, cudaStream_t stream) {
    mxfp4_rows_kernel<In, kLanes, kVector, kRope><<<blocks, kBlockThreads, 0, stream>>>(job);
  }
};

}  // namespace

Status launch_mxfp4_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  return launch_rows<Mxfp4Rows>(job, stream, op);
}

}  // namespace flashindexer::cuda::quant
