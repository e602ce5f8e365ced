// SPDX-License-Identifier: Apache-2.0
// The visible key range of a query row (spec §7), one rule for every backend. The scalar rules
// are FI_HOST_DEVICE so that kernels, the CPU backend and the reference call the same code; the
// TensorView reader at the end is host-only.
//
// Prefill row t sees keys [ks[t], ke[t]). Decode row r = b * next_n + j (0 <= j < next_n) sees
// keys [0, end): with 2-D lengths [B, next_n] end = context_lens[b, j]; with 1-D lengths [B]
// end = context_lens[b] - next_n + j + 1 (the row's own position is the last key it sees). Each
// backend then clamps the range to the keys that exist (the logits width, or the cache's pages).
#pragma once

#include <cstdint>
#include <limits>

#include "core/access.h"
#include "core/host_device.h"
#include "flashindexer/tensor.h"

namespace flashindexer::rows {

// [start, end), start <= end.
struct Range {
  int64_t start;
  int64_t end;
};

// For a clamp with no upper bound (the range is already known to lie within what exists).
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

// Decode row j of a request whose 1-D context length is `context_len`: the end of its keys,
// before clamping (negative when the request is shorter than next_n - j).
FI_HOST_DEVICE int64_t decode_end(int64_t context_len, int next_n, int j) {
  return context_len - next_n + j + 1;
}

// A prefill row's keys [ks, ke) clamped to [0, width]: start = min(max(ks, 0), width), end =
// min(max(ke, start), width).
FI_HOST_DEVICE Range prefill_range(int64_t ks, int64_t ke, int64_t width) {
  const int64_t start = ks < 0 ? 0 : (ks > width ? width : ks);
  const int64_t end = ke < start ? start : (ke > width ? width : ke);
  return {start, end};
}

// A decode row's keys [0, end) clamped to [0, width]: [0, min(max(end, 0), width)).
FI_HOST_DEVICE Range decode_range(int64_t end, int64_t width) {
  return {0, end < 0 ? 0 : (end > width ? width : end)};
}

// Host: the end of decode row r's keys from the lengths view ([B] or [B, next_n] i32), never
// negative and not clamped above: decode_range(end, kUnbounded).end.
inline int64_t decode_row_end(const TensorView& lengths, int next_n, int64_t r) {
  int64_t end;
  if (lengths.rank == 2) {
    const int64_t columns = lengths.shape[1];
    end = *element<int32_t>(lengths, r / columns, r % columns);
  } else if (next_n == 1) {
    end = *element<int32_t>(lengths, r);
  } else {
    end = decode_end(*element<int32_t>(lengths, r / next_n), next_n, static_cast<int>(r % next_n));
  }
  return decode_range(end, kUnbounded).end;
}

}  // namespace flashindexer::rows
