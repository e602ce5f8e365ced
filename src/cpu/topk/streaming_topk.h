// SPDX-License-Identifier: Apache-2.0
// Exact streaming top-k over rank keys (select.h), shared by topk_per_row and the indexer ops.
//
// Scores arrive in chunks of at most kMaxPushed. A score whose order bits are below `floor_` is
// dropped at once; the others are appended as rank keys to a buffer of 2k + kMaxPushed entries.
// When the buffer holds 2k or more, keep_largest keeps the k best and the floor rises to the k-th
// best score: a score below it has k better keys already. The floor may also start from a
// sampled guess (topk_per_row); if fewer than min(n, k) keys survive such a guess, the caller
// rescans with no floor, so the result is always exactly the full selection.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/topk/select.h"

namespace flashindexer::cpu {

inline constexpr int kMaxPushed = 256;

// Appends to `out` the rank keys of the scores whose order bits are >= floor (SIMD, dispatched
// to the CPU's best target); returns how many. `out` has room for n keys.
size_t filter_scores(const float* scores, size_t n, uint32_t floor, uint32_t first_index,
                     uint64_t* out);

inline size_t streaming_topk_capacity(int k) { return 2 * static_cast<size_t>(k) + kMaxPushed; }

class StreamingTopK {
 public:
  // Starts a selection; `buffer` holds streaming_topk_capacity(k) keys.
  void reset(uint64_t* buffer, int k, uint32_t floor = 0) {
    keys_ = buffer;
    k_ = static_cast<size_t>(k);
    count_ = 0;
    floor_ = floor;
  }

  // Offers scores[i] for the key of relative index first_index + i, i < n <= kMaxPushed.
  void push(const float* scores, int n, uint32_t first_index) {
    count_ += filter_scores(scores, static_cast<size_t>(n), floor_, first_index, keys_ + count_);
    if (count_ >= 2 * k_) prune();
  }

  // Keeps the k best (sorted best first when `sorted`) in keys()[0, size()).
  void finish(bool sorted) { count_ = keep_largest(keys_, count_, k_, sorted); }
  uint64_t* keys() const { return keys_; }
  size_t size() const { return count_; }

 private:
  void prune() {
    count_ = keep_largest(keys_, count_, k_, false);
    uint64_t lowest = keys_[0];
    for (size_t i = 1; i < count_; ++i) lowest = lowest < keys_[i] ? lowest : keys_[i];
    floor_ = static_cast<uint32_t>(lowest >> 32);
  }

  uint64_t* keys_ = nullptr;
  size_t k_ = 0;
  size_t count_ = 0;
  uint32_t floor_ = 0;
};

}  // namespace flashindexer::cpu
