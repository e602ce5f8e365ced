// SPDX-License-Identifier: Apache-2.0
// Exact selection under the total order of topk.h, on the 64-bit rank keys of core/rank_key.h
// (order-preserving score bits, inverted index: a larger key ranks first, and the k largest keys
// of distinct indices are a unique set, so every selection algorithm returns the same one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/rank_key.h"

namespace flashindexer::cpu {

// The rank-key rule of core/rank_key.h on a float score.
inline uint32_t ordered_score_bits(float score) {
  uint32_t bits;
  std::memcpy(&bits, &score, sizeof bits);
  return score_key(bits);
}

inline uint64_t rank_key_of_score(float score, uint32_t index) {
  return rank_key(ordered_score_bits(score), index);
}

// Moves the min(n, k) largest keys to keys[0, min(n, k)): in descending order when `sorted`,
// else in the order they had in keys[0, n). Returns min(n, k).
size_t keep_largest(uint64_t* keys, size_t n, size_t k, bool sorted);

// The (rank + 1)-th largest of values[0, n) (rank < n).
uint32_t largest_at_rank(const uint32_t* values, size_t n, size_t rank);

// Writes the indices of keys[0, count) to out[0, count), in that order when `sorted` (the keys
// are best first), else in ascending index order: the order of every unsorted answer, on every
// backend, so it does not depend on how the keys were split or merged on the way. Then -1 to
// out[count, k). The keys are scratch afterwards.
void write_indices(int32_t* out, uint64_t* keys, size_t count, int k, bool sorted);

}  // namespace flashindexer::cpu
