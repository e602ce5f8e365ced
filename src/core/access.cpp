// SPDX-License-Identifier: Apache-2.0
#include "core/access.h"

namespace flashindexer {

int64_t outer_rows(const TensorView& view) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < view.rank; ++d) rows *= view.shape[d];
  return rows;
}

int64_t row_offset(const TensorView& view, int64_t row) {
  int64_t offset = 0;
  for (int d = view.rank - 2; d >= 0; --d) {
    offset += (row % view.shape[d]) * view.stride[d];
    row /= view.shape[d];
  }
  return offset;
}

}  // namespace flashindexer
