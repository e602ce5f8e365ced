// SPDX-License-Identifier: Apache-2.0
// What the GPU tests share: the skip when no device is visible, owning device buffers and
// copies of host tensors and caches (same shapes and strides, device kCUDA).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "flashindexer/flashindexer.h"
#include "support/kcache.h"

namespace fitest {

// Skips unless device 0 runs this build's kernels (there is one, and it is sm_90).
#define SKIP_WITHOUT_GPU()                                          \
  do {                                                              \
    std::string skip_reason;                                        \
    if (!flashindexer::cuda_device_runs_kernels(0, &skip_reason)) { \
      GTEST_SKIP() << skip_reason;                                  \
    }                                                               \
  } while (0)

// For tests of argument checks that touch no device: they run without a GPU and on one that runs
// the kernels, but on a GPU that cannot, every op on CUDA tensors is refused before its checks.
#define SKIP_ON_A_GPU_WITHOUT_THE_KERNELS()                         \
  do {                                                              \
    std::string skip_reason;                                        \
    if (flashindexer::cuda_device_count() > 0 &&                    \
        !flashindexer::cuda_device_runs_kernels(0, &skip_reason)) { \
      GTEST_SKIP() << skip_reason;                                  \
    }                                                               \
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

// `bytes` of device memory filled with kPoisonByte (a workspace or scratch that must not be
// read before it is written).
inline DeviceBuffer poisoned_device_buffer(size_t bytes) {
  DeviceBuffer buffer(bytes);
  EXPECT_EQ(buffer.error(), cudaSuccess);
  if (bytes > 0) {
    EXPECT_EQ(cudaMemset(buffer.get(), kPoisonByte, bytes), cudaSuccess);
  }
  return buffer;
}

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

// A CUDA graph captured on a stream of its own, replayed on it; owns the stream and the graph.
class CapturedGraph {
 public:
  CapturedGraph() { error_ = cudaStreamCreate(&stream_); }
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  cudaStream_t stream() const { return stream_; }

  // Captures launch(stream) (which returns the op's Status) and instantiates the graph. The op's
  // Status, or a failed CUDA call as an error Status.
  template <typename Launch>
  Status capture(Launch launch) {
    if (error_ != cudaSuccess) return failed("cudaStreamCreate");
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      return failed("cudaStreamBeginCapture");
    }
    const Status captured = launch(stream_);
    if (cudaStreamEndCapture(stream_, &graph_) != cudaSuccess)
      return failed("cudaStreamEndCapture");
    if (!captured.ok()) return captured;
    if (cudaGraphInstantiate(&exec_, graph_, 0) != cudaSuccess) {
      return failed("cudaGraphInstantiate");
    }
    return Status::Ok();
  }

  // Launches the graph `times` times, then waits for the stream.
  cudaError_t replay(int times) {
    for (int i = 0; i < times; ++i) {
      if (const cudaError_t error = cudaGraphLaunch(exec_, stream_); error != cudaSuccess) {
        return error;
      }
    }
    return cudaStreamSynchronize(stream_);
  }

 private:
  static Status failed(const char* call) {
    return Status::DeviceError(std::string("graph test: ") + call + " failed");
  }
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  cudaError_t error_ = cudaSuccess;
};

// A host view labelled as a CUDA tensor (never dereferenced): the argument-error tests need no
// GPU, because the checks run on the host before anything touches the device. Undefined views
// stay undefined.
inline TensorView labelled_cuda(TensorView view) {
  if (view.defined()) view.device = Device::kCUDA;
  return view;
}
inline QuantizedTensor labelled_cuda(const QuantizedTensor& t) {
  return {labelled_cuda(t.values), labelled_cuda(t.scales)};
}

// A prefill problem on the device, with its logits buffer.
// Run options with `workspace` (and a stream).
inline RunOptions with_workspace(const DeviceBuffer& workspace, cudaStream_t stream = nullptr) {
  RunOptions options;
  options.cuda_stream = stream;
  options.workspace = workspace.get();
  options.workspace_bytes = workspace.bytes();
  return options;
}

struct DevicePrefill {
  DeviceOperand q;
  DeviceOperand keys;
  DeviceTensor weights;
  DeviceTensor ks;
  DeviceTensor ke;

  explicit DevicePrefill(const PrefillProblem& p)
      : q(to_device(p.q)),
        keys(to_device(p.keys)),
        weights(to_device(p.weights)),
        ks(to_device(p.ks)),
        ke(to_device(p.ke)) {}

  Status run(const DeviceTensor& logits, bool clean, cudaStream_t stream = nullptr) const {
    RunOptions options;
    options.cuda_stream = stream;
    return mqa_logits(logits.view, q.view(), keys.view(), weights.view, ks.view, ke.view,
                      LogitsOptions{clean}, options);
  }
};

// A decode problem on the device.
struct DevicePaged {
  DeviceOperand q;
  DeviceCache cache;
  DeviceTensor weights;
  DeviceTensor context_lens;
  DeviceTensor block_table;

  explicit DevicePaged(DecodeProblem& p)
      : q(to_device(p.q)),
        cache(to_device(p.cache)),
        weights(to_device(p.weights)),
        context_lens(to_device(p.context_lens)),
        block_table(to_device(p.block_table)) {}

  Status run(const DeviceTensor& logits, bool clean, cudaStream_t stream = nullptr) const {
    RunOptions options;
    options.cuda_stream = stream;
    return paged_mqa_logits(logits.view, q.view(), cache.cache, weights.view, context_lens.view,
                            block_table.view, LogitsOptions{clean}, options);
  }
};

}  // namespace fitest
