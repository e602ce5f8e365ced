// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by topk_per_row and the indexer ops.
#pragma once

#include "core/checks.h"
#include "flashindexer/topk.h"

namespace flashindexer {

// out [rows, >= k] i32 with a row stride >= k, and 1 <= k <= kMaxTopK.
void check_topk_output(ArgCheck& check, const TensorView& out, int64_t rows, int k);

// Non-negative decode lengths, [B] or [B, next_n] i32 (values checked on the CPU only).
void check_lengths_non_negative(ArgCheck& check, const char* name, const TensorView& lengths);

}  // namespace flashindexer
