// SPDX-License-Identifier: Apache-2.0
// Argument validation shared by every backend.
//
// An ArgCheck collects the first failure of a chain of checks and turns it into a Status whose
// message names the op, the argument, what was received and what was expected:
//   "mqa_logits: weights has shape [8, 48], expected [8, 64]".
#pragma once

#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

std::string shape_string(const TensorView& view);

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream stream;
  (stream << ... << std::forward<Parts>(parts));
  return stream.str();
}

class ArgCheck {
 public:
  explicit ArgCheck(const char* op) : op_(op) {}

  // The tensor is defined, non-null when non-empty, of one of `dtypes`, of the given rank, with
  // unit stride in its last dimension and non-negative strides.
  ArgCheck& tensor(const char* name, const TensorView& view, std::initializer_list<DType> dtypes,
                   int rank);
  // Like tensor(), but an undefined view is accepted.
  ArgCheck& optional_tensor(const char* name, const TensorView& view,
                            std::initializer_list<DType> dtypes, int rank);
  ArgCheck& dim(const char* name, const TensorView& view, int d, int64_t expected);
  ArgCheck& dim_at_least(const char* name, const TensorView& view, int d, int64_t minimum);
  // Row stride of dimension d is at least `minimum` elements.
  ArgCheck& stride_at_least(const char* name, const TensorView& view, int d, int64_t minimum);
  ArgCheck& on_device(const char* name, const TensorView& view, Device device);
  // Adds the message, its parts concatenated and prefixed with the op, when `ok` is false. The
  // parts are formatted only then: checks run per element (lengths, ranges, pages, slots) on
  // every call, where building a message that is then dropped cost more than the op's planning.
  template <typename... Parts>
  ArgCheck& require(bool ok, const Parts&... parts) {
    return ok ? *this : fail(concat(parts...));
  }

  bool ok() const { return status_.ok(); }
  Status status() const { return status_; }
  const char* op() const { return op_; }

 private:
  ArgCheck& fail(const std::string& message);
  const char* op_;
  Status status_;
};

// The answer of an op on CUDA tensors that has no CUDA implementation in this build (an op
// without a CUDA backend, or any op in a build without CUDA).
inline Status not_on_cuda(const char* op) {
  return Status::Unsupported(
      concat(op,
             ": CUDA tensors are not supported by this build (the CUDA backend of this op "
             "is not available yet); pass CPU tensors"));
}

// Bytes spanned by a view (from its first to one past its last element).
int64_t span_elements(const TensorView& view);

}  // namespace flashindexer
