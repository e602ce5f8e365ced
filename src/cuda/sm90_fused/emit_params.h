// SPDX-License-Identifier: Apache-2.0
// What the fused indexer's scan hands the scoring kernel's emitting epilogue (emit_epilogue.cuh).
// Shared by the host code (C++) and the kernel (CUDA).
#pragma once

#include <cstdint>

namespace flashindexer::cuda::fused {

// Candidate emission packs a key's row slot (< kMaxRowsPerGroup: 3 bits) and its index in the
// row into 32 bits of a queue entry, so a row's keys must lie below 2^29.
constexpr int64_t kMaxEmitKeys = int64_t{1} << 29;

// The scan folds a source layer's block maxima in groups of this many aligned keys
// (block_max.cuh); the fused source takes block sizes that are multiples of it.
constexpr int32_t kGroupKeys = 8;

// No logits are written: a visible key whose score is >= gate[row] (every key, NaN scores too,
// when gate[row] is NaN) is appended to row's slots candidates[row * candidate_capacity, ...) as
// a rank key (score key << 32 | ~(key - lo)), counted in candidate_counts[row], which keeps
// counting past the capacity (overflow). Keys lie below 2^29 (kMaxEmitKeys) of their row's lo.
// With block_max (a source layer, block_max.cuh), every visible score is also folded into the
// entry of its block of block_size keys from lo: block_max[row * block_pitch + (key - lo) /
// block_size], a float or, for rows not laid out in groups, an atomic key over zeroed entries.
struct EmitParams {
  const float* gate = nullptr;
  uint64_t* candidates = nullptr;
  int32_t* candidate_counts = nullptr;
  int32_t candidate_capacity = 0;
  int32_t block_size = 0;  // a multiple of kGroupKeys
  float* block_max = nullptr;
  int64_t block_pitch = 0;
};

}  // namespace flashindexer::cuda::fused
