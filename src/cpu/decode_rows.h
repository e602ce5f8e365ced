// Decode-form visibility (spec §7.3), shared by the CPU scoring and selection ops.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/elements.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cpu {

// End of the visible range of row r: lengths [rows] or [B, next_n] give it directly; lengths
// [B] with next_n > 1 give lengths[r / next_n] - next_n + r % next_n + 1. Never negative.
inline int64_t decode_row_end(const TensorView& lengths, int next_n, int64_t r) {
  int64_t end;
  if (lengths.rank == 2) {
    const int64_t columns = lengths.shape[1];
    end = *element<int32_t>(lengths, r / columns, r % columns);
  } else if (next_n == 1) {
    end = *element<int32_t>(lengths, r);
  } else {
    end = static_cast<int64_t>(*element<int32_t>(lengths, r / next_n)) - next_n + r % next_n + 1;
  }
  return std::max<int64_t>(end, 0);
}

}  // namespace flashindexer::cpu
