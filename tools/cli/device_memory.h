// SPDX-License-Identifier: Apache-2.0
// Buffers for the CLI's ops on either device (`flashindexer run`, `flashindexer bench`): aligned
// host memory for the CPU, cudaMalloc for CUDA, freed together.
#pragma once

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <new>
#include <vector>

#include "flashindexer/flashindexer.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

#define CLI_RETURN_IF_ERROR(expr)            \
  do {                                       \
    ::flashindexer::Status status_ = (expr); \
    if (!status_.ok()) return status_;       \
  } while (false)

namespace flashindexer::cli {

// Buffers on the device the ops run on: aligned host memory for the CPU, cudaMalloc for CUDA.
// Every buffer is freed with the DeviceMemory.
class DeviceMemory {
 public:
  explicit DeviceMemory(Device device) : device_(device) {}
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    for (void* buffer : buffers_) {
#ifdef FLASHINDEXER_WITH_CUDA
      if (device_ == Device::kCUDA) {
        cudaFree(buffer);
        continue;
      }
#endif
      ::operator delete(buffer, kHostAlignment);
    }
  }

  Device device() const { return device_; }

  // A buffer of `bytes` with every byte set to `fill`.
  Status allocate(void** data, size_t bytes, uint8_t fill = 0) {
    CLI_RETURN_IF_ERROR(reserve(data, bytes));
    if (device_ == Device::kCPU) {
      std::memset(*data, fill, bytes);
      return Status::Ok();
    }
#ifdef FLASHINDEXER_WITH_CUDA
    return check_cuda(cudaMemset(*data, fill, bytes), "cudaMemset");
#else
    return no_cuda();
#endif
  }

  // A buffer holding a copy of `bytes` host bytes.
  Status upload(void** data, const void* host, size_t bytes) {
    CLI_RETURN_IF_ERROR(reserve(data, bytes));
    return copy(*data, host, bytes, /*to_device=*/true);
  }

  Status download(void* host, const void* data, size_t bytes) const {
    return copy(host, data, bytes, /*to_device=*/false);
  }

  // Waits for the device's queued work, so that a timing covers it.
  Status synchronize() const {
#ifdef FLASHINDEXER_WITH_CUDA
    if (device_ == Device::kCUDA) return check_cuda(cudaDeviceSynchronize(), "the CUDA kernels");
#endif
    return Status::Ok();
  }

 private:
  static constexpr std::align_val_t kHostAlignment{64};  // a cache line, any SIMD width

  // Uninitialized memory; at least one byte, so that every buffer has a distinct address.
  Status reserve(void** data, size_t bytes) {
    bytes = std::max<size_t>(bytes, 1);
    if (device_ == Device::kCPU) {
      *data = ::operator new(bytes, kHostAlignment);
      buffers_.push_back(*data);
      return Status::Ok();
    }
#ifdef FLASHINDEXER_WITH_CUDA
    CLI_RETURN_IF_ERROR(check_cuda(cudaMalloc(data, bytes), "cudaMalloc"));
    buffers_.push_back(*data);
    return Status::Ok();
#else
    return no_cuda();
#endif
  }

  Status copy(void* destination, const void* source, size_t bytes, bool to_device) const {
    if (bytes == 0) return Status::Ok();
    if (device_ == Device::kCPU) {
      std::memcpy(destination, source, bytes);
      return Status::Ok();
    }
#ifdef FLASHINDEXER_WITH_CUDA
    return check_cuda(cudaMemcpy(destination, source, bytes,
                                 to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost),
                      "cudaMemcpy");
#else
    (void)to_device;
    return no_cuda();
#endif
  }

#ifdef FLASHINDEXER_WITH_CUDA
  static Status check_cuda(cudaError_t error, const char* what) {
    if (error == cudaSuccess) return Status::Ok();
    return Status::DeviceError(fmt::format("{} failed: {}", what, cudaGetErrorString(error)));
  }
#else
  static Status no_cuda() { return Status::Unsupported("this build has no CUDA backend"); }
#endif

  Device device_;
  std::vector<void*> buffers_;
};

template <typename T>
inline Status upload_view(TensorView* view, DeviceMemory& memory, const std::vector<T>& host,
                          DType dtype, std::initializer_list<int64_t> shape) {
  void* data = nullptr;
  CLI_RETURN_IF_ERROR(memory.upload(&data, host.data(), host.size() * sizeof(T)));
  *view = TensorView::contiguous(data, dtype, shape, memory.device());
  return Status::Ok();
}

inline Status allocate_view(TensorView* view, DeviceMemory& memory, DType dtype,
                            std::initializer_list<int64_t> shape, uint8_t fill) {
  *view = TensorView::contiguous(nullptr, dtype, shape, memory.device());
  return memory.allocate(&view->data, view->numel() * dtype_size(dtype), fill);
}

template <typename T>
inline Status download_vector(std::vector<T>* host, const DeviceMemory& memory, const void* data,
                              size_t count) {
  host->resize(count);
  return memory.download(host->data(), data, count * sizeof(T));
}

}  // namespace flashindexer::cli
