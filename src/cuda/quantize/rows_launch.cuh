// SPDX-License-Identifier: Apache-2.0
// The launch of a row kernel (rows_fp8.cu, rows_mxfp4.cu), shared by both formats: the grid for a
// job, and its instantiation by input type (bf16 or f32), lanes per row (D / 8), vector access
// and RoPE. Host code of the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda::quant {
namespace rows_launch {

// Kernel::launch<In, kLanes, kVector, kRope>(job, blocks, stream) launches one instantiation.
template <typename Kernel, typename In, int kLanes, bool kRope>
void launch(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  if (job.vector) {
    Kernel::template launch<In, kLanes, true, kRope>(job, blocks, stream);
  } else {
    Kernel::template launch<In, kLanes, false, kRope>(job, blocks, stream);
  }
}

template <typename Kernel, typename In, int kLanes>
void launch_rope_or_not(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  // RoPE needs D >= 64 (checked by src/api): no rotating instantiation for 4-lane rows.
  if constexpr (kLanes >= 8) {
    if (job.rope.style != static_cast<int>(RopeStyle::kNone)) {
      return launch<Kernel, In, kLanes, true>(job, blocks, stream);
    }
  }
  launch<Kernel, In, kLanes, false>(job, blocks, stream);
}

template <typename Kernel, typename In>
void launch_by_dim(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  switch (job.head_dim) {
    case 32:
      return launch_rope_or_not<Kernel, In, 4>(job, blocks, stream);
    case 64:
      return launch_rope_or_not<Kernel, In, 8>(job, blocks, stream);
    case 128:
      return launch_rope_or_not<Kernel, In, 16>(job, blocks, stream);
    default:
      return launch_rope_or_not<Kernel, In, 32>(job, blocks, stream);
  }
}

}  // namespace rows_launch

// Launches `job` with the row kernel Kernel (one group of D / 8 lanes per kRowsPerGroup rows).
template <typename Kernel>
Status launch_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  if (job.rows == 0) return Status::Ok();
  const int64_t groups = (job.rows + kRowsPerGroup - 1) / kRowsPerGroup;
  const int64_t threads = groups * (job.head_dim / kLaneValues);
  const unsigned blocks = static_cast<unsigned>((threads + kBlockThreads - 1) / kBlockThreads);
  if (job.input_bf16) {
    rows_launch::launch_by_dim<Kernel, Bf16Bits>(job, blocks, stream);
  } else {
    rows_launch::launch_by_dim<Kernel, float>(job, blocks, stream);
  }
  return launch_status(op);
}

}  // namespace flashindexer::cuda::quant
