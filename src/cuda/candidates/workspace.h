// SPDX-License-Identifier: Apache-2.0
// How the candidate ops lay their scratch in the caller's workspace: arrays one after another,
// each 256-byte aligned, then the top-k's scratch in what is left. Host code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/checks.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::candidates {

constexpr size_t kArrayAlignment = 256;

inline size_t align_bytes(size_t bytes) {
  return (bytes + kArrayAlignment - 1) / kArrayAlignment * kArrayAlignment;
}

// Floats between rows of a scratch matrix of `columns` columns (256-byte rows, never 0).
inline int64_t pitch_floats(int64_t columns) {
  const int64_t per_row = static_cast<int64_t>(kArrayAlignment / sizeof(float));
  return ((columns > 0 ? columns : 1) + per_row - 1) / per_row * per_row;
}

class Carver {
 public:
  explicit Carver(const RunOptions& options)
      : base_(static_cast<unsigned char*>(options.workspace)), bytes_(options.workspace_bytes) {}

  // The workspace holds `needed` bytes: what the op's size query returns, which counts
  // kArrayAlignment bytes of slack for aligning the first array.
  Status check(const char* op, size_t needed, const char* size_query) {
    if (needed == 0) return Status::Ok();
    if (base_ == nullptr || bytes_ < needed) {
      return Status::WorkspaceTooSmall(
          concat(op, ": CUDA tensors need RunOptions.workspace of at least ", needed, " bytes (",
                 size_query, "); got ", base_ == nullptr ? 0 : bytes_, " bytes"));
    }
    if (reinterpret_cast<uintptr_t>(base_) % 16 != 0) {
      return Status::InvalidArgument(
          concat(op, ": RunOptions.workspace must be 16-byte aligned for CUDA tensors"));
    }
    const uintptr_t start = reinterpret_cast<uintptr_t>(base_);
    const uintptr_t aligned = (start + kArrayAlignment - 1) / kArrayAlignment * kArrayAlignment;
    used_ = aligned - start;
    return Status::Ok();
  }

  template <typename T>
  T* take(size_t count) {
    T* at = reinterpret_cast<T*>(base_ + used_);
    used_ += align_bytes(count * sizeof(T));
    return at;
  }
  void* rest() const { return base_ + used_; }
  size_t rest_bytes() const { return bytes_ - used_; }

 private:
  unsigned char* base_;
  size_t bytes_;
  size_t used_ = 0;
};

}  // namespace flashindexer::cuda::candidates
