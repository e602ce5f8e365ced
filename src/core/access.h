// SPDX-License-Identifier: Apache-2.0
// Host access to the elements of a view: strided addressing, index reads and the row walk of a
// view's outer dimensions. Shared by the argument checks, the CPU backend and the DCP functions.
#pragma once

#include <cstdint>

#include "flashindexer/tensor.h"

namespace flashindexer {

// Address of element (i0, i1, ...) of a view.
template <typename T, typename... Index>
T* element(const TensorView& view, Index... index) {
  // An empty view may have no memory (null data); offsetting null is undefined even unread.
  if (view.data == nullptr) return nullptr;
  const int64_t indices[] = {static_cast<int64_t>(index)...};
  int64_t offset = 0;
  for (size_t d = 0; d < sizeof...(Index); ++d) offset += indices[d] * view.stride[d];
  return static_cast<T*>(view.data) + offset;
}

inline int32_t read_index(const TensorView& view, int64_t i) {
  return view.dtype == DType::kI64 ? static_cast<int32_t>(*element<int64_t>(view, i))
                                   : *element<int32_t>(view, i);
}

// Number of rows of a view (product of all but the last dimension) and the element offset of
// flat row `row` (row-major over the outer dimensions, honouring their strides).
int64_t outer_rows(const TensorView& view);
int64_t row_offset(const TensorView& view, int64_t row);

}  // namespace flashindexer
