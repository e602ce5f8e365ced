// SPDX-License-Identifier: Apache-2.0
// What the fused indexer's scan hands the scoring kernel's emitting epilogue (emit_epilogue.cuh).
// Shared by the host code (C++) and the kernel (CUDA).
#pragma once

#include <cstdint>

namespace flashindexer::cuda::fused {

// Candidate emission packs a key's row slot (< kMaxRowsPerGroup: 3 bits) and its index in the
// row into 32 bits of a queue entry, so a row's keys must lie below 2^29.
constexpr int64_t kMaxEmitKeys = int64_t{1} << 29;

// No logits are written: a visible key whose score is >= gate[row] (every key, NaN scores too,
// when gate[row] is NaN) is appended to row's slots candidates[row * candidate_capacity, ...) as
// a rank key (score key << 32 | ~(key - lo)), counted in candidate_counts[row], which keeps
// counting past the capacity (overflow). Keys lie below 2^29 (kMaxEmitKeys) of their row's lo.
struct EmitParams {
  const float* gate = nullptr;
  uint64_t* candidates = nullptr;
  int32_t* candidate_counts = nullptr;
  int32_t candidate_capacity = 0;
};

}  // namespace flashindexer::cuda::fused
