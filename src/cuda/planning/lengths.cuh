// SPDX-License-Identifier: Apache-2.0
// Device-side request lengths as the planning kernels read them (decode_lens.cu,
// prefill_bounds.cu): an i32 or i64 tensor the host never read, each value clamped to
// [0, 2^31 - 1] as planning.h documents, so no later index computed from it leaves the outputs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashindexer/tensor.h"

namespace flashindexer::cuda::planning_lengths {

constexpr int64_t kMaxLength = 0x7fffffff;

struct Lengths {
  const void* data;
  int wide;  // 1: i64 entries, 0: i32
};

inline Lengths lengths_of(const TensorView& view) { return {view.data, view.dtype == DType::kI64}; }

__device__ __forceinline__ int64_t load_length(const Lengths& lengths, int64_t i) {
  const int64_t value = lengths.wide ? static_cast<const int64_t*>(lengths.data)[i]
                                     : static_cast<const int32_t*>(lengths.data)[i];
  return value < 0 ? 0 : value > kMaxLength ? kMaxLength : value;
}

}  // namespace flashindexer::cuda::planning_lengths
