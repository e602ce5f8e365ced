// SPDX-License-Identifier: Apache-2.0
#include "flashindexer/tensor.h"

#include "flashindexer/status.h"

namespace flashindexer {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kWorkspaceTooSmall:
      return "workspace too small";
    case StatusCode::kDeviceError:
      return "device error";
  }
  return "unknown";
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kE4M3:
      return "e4m3";
    case DType::kE2M1x2:
      return "e2m1x2";
    case DType::kUE8M0:
      return "ue8m0";
    case DType::kI32:
      return "i32";
    case DType::kI64:
      return "i64";
    case DType::kU8:
      return "u8";
  }
  return "unknown";
}

const char* device_name(Device device) { return device == Device::kCUDA ? "cuda" : "cpu"; }

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
      return 2;
    case DType::kI64:
      return 8;
    case DType::kE4M3:
    case DType::kE2M1x2:
    case DType::kUE8M0:
    case DType::kU8:
      return 1;
  }
  return 0;
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.device = device;
  view.rank = static_cast<int>(shape.size());
  if (view.rank > kMaxRank) return view;  // refused by every op (its extents are not kept)
  int dim = 0;
  for (int64_t extent : shape) view.shape[dim++] = extent;
  int64_t stride = 1;
  for (int d = view.rank - 1; d >= 0; --d) {
    view.stride[d] = stride;
    stride *= view.shape[d];
  }
  return view;
}

TensorView TensorView::with_row_stride(int64_t row_stride) const {
  TensorView view = *this;
  // Dimension rank-2 gets the new stride; the outer ones follow contiguously from it.
  if (rank >= 2 && rank <= kMaxRank) {
    view.stride[rank - 2] = row_stride;
    for (int d = rank - 3; d >= 0; --d) view.stride[d] = view.stride[d + 1] * view.shape[d + 1];
  }
  return view;
}

int64_t TensorView::numel() const {
  if (rank <= 0 || rank > kMaxRank) return 0;
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = held_rank() - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

}  // namespace flashindexer
