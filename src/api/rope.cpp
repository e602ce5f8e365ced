// SPDX-License-Identifier: Apache-2.0
#include "api/rope.h"

#include "core/access.h"

namespace flashindexer {

const char* rope_style_name(RopeStyle style) {
  switch (style) {
    case RopeStyle::kNone:
      return "none";
    case RopeStyle::kNeox:
      return "neox";
    case RopeStyle::kInterleaved:
      return "interleaved";
  }
  return "unknown";
}

void check_rope(ArgCheck& check, const RopeOptions& rope, int64_t head_dim, int64_t rows,
                Device device) {
  const bool known_style = rope.style == RopeStyle::kNone || rope.style == RopeStyle::kNeox ||
                           rope.style == RopeStyle::kInterleaved;
  check.require(known_style, "rope.style=", static_cast<int>(rope.style),
                " is not a RopeStyle (none, neox or interleaved)");
  if (!check.ok() || !rope.enabled()) return;
  check
      .require(rope.dims == RopeDims::kFirst64 || rope.dims == RopeDims::kLast64,
               "rope.dims is not given: a rotation needs kFirst64 or kLast64 (the style is ",
               rope_style_name(rope.style), ")")
      .require(head_dim >= kRopeDims, "rope rotates ", kRopeDims,
               " dims, but the vectors have D=", head_dim)
      .tensor("rope.cos_sin_cache", rope.cos_sin_cache, {DType::kF32, DType::kBF16}, 2)
      .tensor("rope.positions", rope.positions, {DType::kI64, DType::kI32}, 1);
  if (!check.ok()) return;
  check.dim("rope.cos_sin_cache", rope.cos_sin_cache, 1, kRopeDims)
      .dim_at_least("rope.positions", rope.positions, 0, rows)
      .on_device("rope.cos_sin_cache", rope.cos_sin_cache, device)
      .on_device("rope.positions", rope.positions, device);
}

void check_rope_position(ArgCheck& check, const RopeOptions& rope, int64_t row) {
  const int64_t position = rope.positions.dtype == DType::kI64
                               ? *element<int64_t>(rope.positions, row)
                               : *element<int32_t>(rope.positions, row);
  const int64_t table_rows = rope.cos_sin_cache.shape[0];
  check.require(position >= 0 && position < table_rows, "rope.positions[", row, "]=", position,
                " is out of range, expected 0 <= position < ", table_rows,
                " (the cos_sin_cache rows)");
}

}  // namespace flashindexer
