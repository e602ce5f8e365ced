// SPDX-License-Identifier: Apache-2.0
// Owning host tensors, the poison values outputs start from, and random real inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "support/seed.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Bits

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr int32_t kPoisonIndex = 0x5A5A5A5A;        // never a valid top-k output
inline constexpr uint32_t kPoisonLogitBits = 0x7FA5A5A5u;  // a NaN no op would produce
inline constexpr uint8_t kPoisonByte = 0xCD;

// ---------------------------------------------------------------------------------------------
// Owning host tensors

// A host buffer together with its TensorView. Move-only, so the view never dangles.
// `row_stride` (elements, 0 = contiguous) replaces the stride of dimension rank-2; outer
// dimensions follow contiguously from it, as TensorView::with_row_stride defines.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_stride = 0) {
    view_.dtype = dtype;
    view_.device = Device::kCPU;
    view_.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = view_.rank - 1; d >= 0; --d) {
      view_.shape[d] = shape[d];
      view_.stride[d] = stride;
      stride *= shape[d];
    }
    if (row_stride > 0 && view_.rank >= 2) {
      view_.stride[view_.rank - 2] = row_stride;
      for (int d = view_.rank - 3; d >= 0; --d) {
        view_.stride[d] = view_.stride[d + 1] * view_.shape[d + 1];
      }
    }
    const int64_t elements = view_.rank == 0 ? 0 : view_.shape[0] * view_.stride[0];
    byte_size_ = static_cast<size_t>(std::max<int64_t>(elements, 0)) * dtype_size(dtype);
    storage_.assign(byte_size_ / 8 + 1, 0);
    view_.data = storage_.data();
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(view_.data);
  }
  uint8_t* bytes() const { return static_cast<uint8_t*>(view_.data); }
  size_t byte_size() const { return byte_size_; }
  int64_t size(int dim) const { return view_.shape[dim]; }
  int64_t stride(int dim) const { return view_.stride[dim]; }
  void fill_bytes(uint8_t byte) { std::memset(view_.data, byte, byte_size_); }
  template <typename T>
  void fill(T value) {
    T* p = data<T>();
    for (size_t i = 0; i < byte_size_ / sizeof(T); ++i) p[i] = value;
  }
  // Element at a multi-index, honouring the strides.
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const {
    int64_t offset = 0;
    int dim = 0;
    for (int64_t i : index) offset += i * view_.stride[dim++];
    return data<T>()[offset];
  }

 private:
  std::vector<uint64_t> storage_;
  size_t byte_size_ = 0;
  TensorView view_;
};

inline HostTensor i32_tensor(const std::vector<int32_t>& values) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// Lengths as a 1-D tensor of `dtype` (i32 or i64).
inline HostTensor lengths_tensor(const std::vector<int64_t>& values, DType dtype) {
  HostTensor t(dtype, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::kI64) {
      t.data<int64_t>()[i] = values[i];
    } else {
      t.data<int32_t>()[i] = static_cast<int32_t>(values[i]);
    }
  }
  return t;
}

// A view of `data` with the given dtype and shape, row-major contiguous.
inline TensorView view_of(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, dtype, shape);
}

// ---------------------------------------------------------------------------------------------
// Random real inputs

// Gaussian values with one random magnitude per row (2^[-4, 4]), like real keys / heads.
inline std::vector<float> random_rows(Rng& rng, int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float sigma = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-4, 4)));
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = rng.normal(sigma);
  }
  return x;
}

}  // namespace fitest
