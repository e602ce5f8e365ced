// SPDX-License-Identifier: Apache-2.0
// Argument checks of the RoPE options (flashindexer/rope.h) that the query quantizers and the
// cache writer take.
#pragma once

#include <cstdint>

#include "core/checks.h"
#include "flashindexer/rope.h"

namespace flashindexer {

// The options are well formed for vectors of `head_dim` values on `device`, with positions for
// `rows` rows. Values are not read here (see rope_position_ok).
void check_rope(ArgCheck& check, const RopeOptions& rope, int64_t head_dim, int64_t rows,
                Device device);

// On CPU tensors: positions[row] lies in [0, cos_sin_cache rows), else an error naming it.
void check_rope_position(ArgCheck& check, const RopeOptions& rope, int64_t row);

}  // namespace flashindexer
