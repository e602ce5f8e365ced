// Exact selection under the total order of topk.h, on 64-bit rank keys.
//
// A rank key packs (order-preserving score bits, inverted index) so that a larger key ranks
// first: NaN maps to the lowest score bits, -0.0 to +0.0, and among equal scores the smaller
// index has the larger inverted index. Keys of distinct indices are distinct, so the k largest
// keys are a unique set and every selection algorithm returns the same one.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace flashindexer::cpu {

// Branch-free (scores are random, a branch on the sign would mispredict half the time):
// sign set -> ~bits, sign clear -> bits | 0x80000000, then -0 -> +0 and NaN -> 0.
inline uint32_t ordered_score_bits(float score) {
  uint32_t bits;
  std::memcpy(&bits, &score, sizeof bits);
  uint32_t order = bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
  order += bits == 0x80000000u;  // -0: 0x7fffffff + 1 = the order of +0
  const bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
  return nan ? 0u : order;
}

inline uint64_t rank_key_of_bits(uint32_t order_bits, uint32_t index) {
  return static_cast<uint64_t>(order_bits) << 32 | static_cast<uint32_t>(~index);
}

inline uint64_t rank_key(float score, uint32_t index) {
  return rank_key_of_bits(ordered_score_bits(score), index);
}

inline int32_t rank_key_index(uint64_t key) {
  return static_cast<int32_t>(~static_cast<uint32_t>(key));
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
