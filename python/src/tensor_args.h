// SPDX-License-Identifier: Apache-2.0
// Turning Python arguments into FlashIndexer views: any DLPack tensor (PyTorch, CuPy, JAX, NumPy;
// CPU or CUDA) or buffer-protocol array, without a copy. PyTorch tensors are read by their
// attributes (data_ptr, shape, stride, dtype, device) rather than exported through DLPack, which
// cost most of an eager call's host time (tensor_args.cpp, TorchReader).
//
// One ArgumentList serves one op call. It keeps every imported array alive until the call ends,
// checks what the C++ API cannot see (the rank limit, writable outputs, one CUDA device for all
// tensors, the workspace's device), and runs the op with the GIL released on the tensors' device.
//
// Dtypes. float32 -> f32, bfloat16 -> bf16, float8_e4m3fn -> e4m3, float8_e8m0fnu -> ue8m0,
// int32 -> i32, int64 -> i64. NumPy and CuPy have no 8-bit float type, so a uint8 tensor is read
// as the byte format the argument expects (e4m3, packed e2m1x2, ue8m0 or raw page bytes). A
// tuple (array, "e4m3") names the format of a raw array explicitly; the Python package passes
// ml_dtypes arrays (float8_e4m3fn, bfloat16, ...) this way, as their uint8 / uint16 views.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <string>
#include <vector>

#include "flashindexer/flashindexer.h"

namespace flashindexer::python {

namespace nb = nanobind;

// Raises the Python exception that matches `status` (no-op when it is ok):
//   kInvalidArgument -> TypeError for a wrong dtype, ValueError otherwise;
//   kUnsupported -> NotImplementedError; kWorkspaceTooSmall -> ValueError;
//   kDeviceError -> RuntimeError.
void raise_if_error(const Status& status);

// Raises `type(message)` as a Python exception.
[[noreturn]] void raise(PyObject* type, const std::string& message);

class ArgumentList {
 public:
  explicit ArgumentList(const char* op) : op_(op) {}

  // An input tensor; None gives an undefined view. `bytes_as` is the format a uint8 tensor
  // stands for in this argument.
  TensorView input(const char* name, nb::handle object, DType bytes_as = DType::kU8);
  // An output tensor: must be writable.
  TensorView output(const char* name, nb::handle object, DType bytes_as = DType::kU8);
  // A paged K cache: an object with attributes data (uint8 [num_pages, >= page bytes] or
  // [num_pages, page_size, bytes per key]), page_size, head_dim and format ("fp8" or "mxfp4").
  PagedKCache cache(const char* name, nb::handle object, bool writable);
  // Stream, workspace (a tensor on the op's device; its bytes are used) and CPU threads.
  RunOptions options(uintptr_t cuda_stream, nb::handle workspace, int cpu_threads);

  // Runs `op_call()` (returning a Status) with the GIL released, on the CUDA device of the
  // tensors when they live on one, and raises on failure.
  template <typename Call>
  void run(Call&& op_call) {
    Status status;
    {
      DeviceScope scope(cuda_device_);
      nb::gil_scoped_release released;
      status = op_call();
    }
    raise_if_error(status);
  }

  // Runs `body()` with the GIL released on CUDA device `device` (-1: the current one).
  template <typename Body>
  static void run_on(int device, Body&& body) {
    DeviceScope scope(device);
    nb::gil_scoped_release released;
    body();
  }

  const char* op() const { return op_; }

 private:
  // Makes `device` current for its lifetime (nothing for -1 or a build without CUDA).
  class DeviceScope {
   public:
    explicit DeviceScope(int device);
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

   private:
    int previous_ = -1;
  };

  TensorView view(const char* name, nb::handle object, DType bytes_as, bool writable);
  // Imports `array` (a PyTorch tensor by its attributes, anything else through DLPack or the
  // buffer protocol) into view's data, rank, shape and strides, keeping it alive for the call;
  // raises (naming `where`) for a non-tensor, a read-only output or a rank outside 1..kMaxRank.
  void import(const std::string& where, nb::handle array, bool writable, TensorView& view,
              nb::dlpack::dtype& dtype, int& device_type, int& device_id);
  void note_device(const char* name, Device device, int device_id);

  const char* op_;
  int cuda_device_ = -1;
  std::string cuda_device_argument_;  // the argument that fixed cuda_device_
  std::vector<nb::ndarray<nb::ro>> inputs_;
  std::vector<nb::ndarray<>> outputs_;
  std::vector<nb::object> held_;  // PyTorch tensors read by their attributes
};

}  // namespace flashindexer::python
