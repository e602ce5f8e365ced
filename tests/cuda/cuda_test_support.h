// What the GPU tests share: the skip when no device is visible, owning device buffers and
// copies of host tensors and caches (same shapes and strides, device kCUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "flashindexer/flashindexer.h"
#include "test_inputs.h"

namespace fitest {

#define SKIP_WITHOUT_GPU()                                                        \
  do {                                                                            \
    if (flashindexer::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

// An owning device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) error_ = cudaMalloc(&data_, bytes_);
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    std::swap(error_, other.error_);
    return *this;
  }
  void* get() const { return data_; }
  size_t bytes() const { return bytes_; }
  cudaError_t error() const { return error_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  cudaError_t error_ = cudaSuccess;
};

// A device copy of a host tensor: same dtype, shape and strides.
struct DeviceTensor {
  DeviceBuffer buffer;
  TensorView view;
};

inline DeviceTensor to_device(const HostTensor& host) {
  DeviceTensor device{DeviceBuffer(host.byte_size() + 16), host.view()};
  EXPECT_EQ(device.buffer.error(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device.buffer.get(), host.bytes(), host.byte_size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  device.view.data = device.buffer.get();
  device.view.device = Device::kCUDA;
  return device;
}

inline void to_host(const HostTensor& host, const DeviceTensor& device) {
  ASSERT_EQ(cudaMemcpy(host.bytes(), device.buffer.get(), host.byte_size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
}

struct DeviceOperand {
  DeviceTensor values;
  DeviceTensor scales;
  QuantizedTensor view() const { return {values.view, scales.view}; }
};

inline DeviceOperand to_device(const Operand& host) {
  DeviceOperand device{to_device(host.values), {}};
  if (host.scales.view().data != nullptr) device.scales = to_device(host.scales);
  return device;
}

// A device copy of a paged cache (same pages, same strides).
struct DeviceCache {
  DeviceBuffer buffer;
  PagedKCache cache;
};

inline DeviceCache to_device(CacheBuffer& host) {
  DeviceCache device{DeviceBuffer(static_cast<size_t>(host.total_bytes())), host.cache()};
  EXPECT_EQ(cudaMemcpy(device.buffer.get(), host.base(), static_cast<size_t>(host.total_bytes()),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  device.cache.data = device.buffer.get();
  device.cache.device = Device::kCUDA;
  return device;
}

}  // namespace fitest
