// SPDX-License-Identifier: Apache-2.0
// Facts about the current CUDA device that launch plans depend on.
#pragma once

#include <cuda_runtime.h>

namespace flashindexer::cuda {

constexpr int kAssumedSms = 132;  // H100/H200 SXM, when no device can be asked

// Multiprocessors of the current device (kAssumedSms when none can be asked, e.g. when only
// sizing a workspace on a machine without a GPU).
inline int multiprocessor_count() {
  int device = 0;
  int sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      sms <= 0) {
    cudaGetLastError();  // clear a sticky "no device" error
    return kAssumedSms;
  }
  return sms;
}

}  // namespace flashindexer::cuda
