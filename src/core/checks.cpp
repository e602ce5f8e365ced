// SPDX-License-Identifier: Apache-2.0
#include "core/checks.h"

namespace flashindexer {

std::string shape_string(const TensorView& view) {
  std::string text = "[";
  for (int d = 0; d < view.held_rank(); ++d) {
    if (d > 0) text += ", ";
    text += std::to_string(view.shape[d]);
  }
  return text + "]";
}

int64_t span_elements(const TensorView& view) {
  if (view.numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < view.held_rank(); ++d) last += (view.shape[d] - 1) * view.stride[d];
  return last + 1;
}

ArgCheck& ArgCheck::fail(const std::string& message) {
  if (status_.ok()) status_ = Status::InvalidArgument(concat(op_, ": ", message));
  return *this;
}

ArgCheck& ArgCheck::tensor(const char* name, const TensorView& view,
                           std::initializer_list<DType> dtypes, int rank) {
  if (!ok()) return *this;
  if (!view.defined()) return fail(concat(name, " is missing (an undefined tensor view)"));
  bool dtype_ok = false;
  std::string expected;
  for (DType dtype : dtypes) {
    dtype_ok |= view.dtype == dtype;
    expected += expected.empty() ? dtype_name(dtype) : concat(" or ", dtype_name(dtype));
  }
  if (!dtype_ok) {
    return fail(concat(name, " has dtype ", dtype_name(view.dtype), ", expected ", expected));
  }
  if (view.rank > kMaxRank) {
    return fail(concat(name, " has rank ", view.rank, ", expected rank ", rank, " (a view holds ",
                       kMaxRank, " dimensions at most)"));
  }
  if (view.rank != rank) {
    return fail(concat(name, " has rank ", view.rank, " (shape ", shape_string(view),
                       "), expected rank ", rank));
  }
  for (int d = 0; d < rank; ++d) {
    if (view.shape[d] < 0) return fail(concat(name, " has a negative extent ", shape_string(view)));
    if (view.stride[d] < 0) return fail(concat(name, " has a negative stride in dimension ", d));
  }
  if (view.numel() > 0 && view.data == nullptr) {
    return fail(concat(name, " has a null data pointer with shape ", shape_string(view)));
  }
  if (view.shape[rank - 1] > 1 && view.stride[rank - 1] != 1) {
    return fail(concat(name, " has stride ", view.stride[rank - 1],
                       " in its last dimension, expected 1 (rows must be contiguous)"));
  }
  return *this;
}

ArgCheck& ArgCheck::optional_tensor(const char* name, const TensorView& view,
                                    std::initializer_list<DType> dtypes, int rank) {
  return view.defined() ? tensor(name, view, dtypes, rank) : *this;
}

ArgCheck& ArgCheck::dim(const char* name, const TensorView& view, int d, int64_t expected) {
  if (!ok() || view.shape[d] == expected) return *this;
  return fail(concat(name, " has shape ", shape_string(view), ", expected size ", expected,
                     " in dimension ", d));
}

ArgCheck& ArgCheck::dim_at_least(const char* name, const TensorView& view, int d, int64_t minimum) {
  if (!ok() || view.shape[d] >= minimum) return *this;
  return fail(concat(name, " has shape ", shape_string(view), ", expected at least ", minimum,
                     " in dimension ", d));
}

ArgCheck& ArgCheck::stride_at_least(const char* name, const TensorView& view, int d,
                                    int64_t minimum) {
  if (!ok() || view.shape[d] <= 1 || view.stride[d] >= minimum) return *this;
  return fail(concat(name, " has stride ", view.stride[d], " in dimension ", d,
                     ", expected at least ", minimum));
}

ArgCheck& ArgCheck::on_device(const char* name, const TensorView& view, Device device) {
  if (!ok() || !view.defined() || view.device == device) return *this;
  return fail(concat(name, " is on ", device_name(view.device), ", expected ", device_name(device),
                     " like the other tensors"));
}

}  // namespace flashindexer
