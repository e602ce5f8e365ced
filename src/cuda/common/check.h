// SPDX-License-Identifier: Apache-2.0
// CUDA error handling for the launch code: every runtime call's result becomes a Status.
#pragma once

#include <cuda_runtime.h>

#include "core/checks.h"
#include "flashindexer/status.h"

namespace flashindexer::cuda {

inline Status to_status(cudaError_t error, const char* op, const char* what) {
  if (error == cudaSuccess) return Status::Ok();
  return Status::DeviceError(concat(op, ": ", what, " failed: ", cudaGetErrorName(error), " (",
                                    cudaGetErrorString(error), ")"));
}

// The status of the kernel launch just issued (configuration errors surface here).
inline Status launch_status(const char* op) {
  return to_status(cudaGetLastError(), op, "kernel launch");
}

}  // namespace flashindexer::cuda
