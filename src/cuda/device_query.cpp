// SPDX-License-Identifier: Apache-2.0
// The CUDA runtime's answers behind device_query.h. Every failed query clears the runtime's
// sticky error, so a machine without a driver or a device reads as "none" and later calls work.
#include "cuda/device_query.h"

#include <cuda_runtime.h>

namespace flashindexer::cuda {

bool backend_built() { return true; }

const char* built_archs() { return FLASHINDEXER_CUDA_ARCHS; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

int current_device() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

bool compute_capability(int device, int* major, int* minor) {
  if (cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

std::string device_name(int device) {
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  return properties.name;
}

}  // namespace flashindexer::cuda
