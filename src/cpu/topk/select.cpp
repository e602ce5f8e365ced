// SPDX-License-Identifier: Apache-2.0
#include "cpu/topk/select.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace flashindexer::cpu {
namespace {

constexpr int kBinBits = 11;
constexpr uint32_t kBins = 1u << kBinBits;

// Sorts values[0, n) ascending through scratch[0, n): an LSD radix sort on 11-bit digits, with
// every digit's histogram from one read and only as many scatter passes as the largest value
// has digits (2 for rows of up to 4M keys). Only answers that did not come out of the selection
// in index order need it (the DCP merge's, whose candidates arrive rank by rank).
void sort_indices(uint32_t* values, size_t n, uint32_t* scratch) {
  constexpr int kDigitBits = 11;
  constexpr uint32_t kMask = (1u << kDigitBits) - 1;
  constexpr int kPasses = (32 + kDigitBits - 1) / kDigitBits;
  if (n < 64) {  // not worth clearing the histograms
    std::sort(values, values + n);
    return;
  }
  uint32_t counts[kPasses][kMask + 1] = {};
  uint32_t largest = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t value = values[i];
    largest = std::max(largest, value);
    for (int pass = 0; pass < kPasses; ++pass)
      ++counts[pass][(value >> (pass * kDigitBits)) & kMask];
  }
  uint32_t* from = values;
  uint32_t* to = scratch;
  for (int pass = 0; pass < kPasses && (largest >> (pass * kDigitBits)) != 0; ++pass) {
    uint32_t sum = 0;
    for (uint32_t& start : counts[pass]) {
      const uint32_t count = start;
      start = sum;
      sum += count;
    }
    const int shift = pass * kDigitBits;
    for (size_t i = 0; i < n; ++i) to[counts[pass][(from[i] >> shift) & kMask]++] = from[i];
    std::swap(from, to);
  }
  if (from != values) std::copy_n(from, n, values);
}

// The score bits of a key: the key itself, or the upper half of a rank key.
inline uint32_t score_bits(uint32_t key) { return key; }
inline uint32_t score_bits(uint64_t key) { return static_cast<uint32_t>(key >> 32); }

// The occupied range [lo, hi] of keys[0, n), from the score bits alone (32-bit minima and maxima
// vectorize; 64-bit ones did not); a rank key's index bits then span all of it.
template <typename Key>
struct KeyRange {
  Key lo, hi;
};
template <typename Key>
KeyRange<Key> occupied_range(const Key* keys, size_t n) {
  uint32_t lowest = UINT32_MAX;
  uint32_t highest = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t score = score_bits(keys[i]);
    lowest = std::min(lowest, score);
    highest = std::max(highest, score);
  }
  if constexpr (sizeof(Key) == sizeof(uint64_t)) {
    return {static_cast<uint64_t>(lowest) << 32,
            static_cast<uint64_t>(highest) << 32 | 0xffffffffu};
  } else {
    return {lowest, highest};
  }
}

// The key of rank `rank` (0 = the largest) among keys[0, n) (rank < n), and how many keys are
// larger; reads only. A histogram of kBins bins over the occupied range [lo, hi], then the same
// inside the bin that holds the rank, until that bin holds at most kGatherMax keys, which
// nth_element ranks in a small array: usually two passes over the keys and a few gathered.
template <typename Key>
struct RankedKey {
  Key key;
  size_t larger;
};
constexpr size_t kGatherMax = 256;

template <typename Key>
RankedKey<Key> key_at_rank(const Key* keys, size_t n, size_t rank) {
  auto [lo, hi] = occupied_range(keys, n);
  size_t in_range = n;  // keys in [lo, hi]
  size_t larger = 0;    // keys above hi
  while (in_range > kGatherMax && hi > lo) {
    const int bits = 64 - __builtin_clzll(static_cast<uint64_t>(hi - lo));
    const int shift = bits > kBinBits ? bits - kBinBits : 0;
    uint32_t counts[kBins] = {};
    for (size_t i = 0; i < n; ++i) {
      const Key offset = static_cast<Key>(keys[i] - lo);  // wraps for keys below lo
      if (offset <= static_cast<Key>(hi - lo)) ++counts[offset >> shift];
    }
    auto bin = static_cast<uint32_t>((hi - lo) >> shift);
    while (larger + counts[bin] <= rank) larger += counts[bin--];
    in_range = counts[bin];
    lo += static_cast<Key>(static_cast<Key>(bin) << shift);
    hi = std::min<Key>(hi, lo + static_cast<Key>((Key{1} << shift) - 1));
  }
  if (in_range > kGatherMax) return {lo, larger};  // hi == lo: all of them equal
  // Branch-free: whether a key is in range is a coin flip near the cutoff, and a branch on it
  // mispredicted often enough to double the selection's time. (Zeroed only because the
  // compiler cannot see that the rank's slot, rank - larger < count, is always written.)
  Key gathered[kGatherMax + 1] = {};
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    gathered[count] = keys[i];
    count += static_cast<Key>(keys[i] - lo) <= static_cast<Key>(hi - lo) ? 1 : 0;
  }
  Key* const at = gathered + (rank - larger);
  std::nth_element(gathered, at, gathered + count, std::greater<Key>());
  const Key key = *at;
  for (size_t i = 0; i < count; ++i) larger += gathered[i] > key ? 1 : 0;
  return {key, larger};
}

}  // namespace

uint32_t largest_at_rank(const uint32_t* values, size_t n, size_t rank) {
  return key_at_rank(values, n, rank).key;
}

size_t keep_largest(uint64_t* keys, size_t n, size_t k, bool sorted) {
  const size_t kept = std::min(n, k);
  if (kept == 0) return 0;
  if (kept < n) {
    // The kept keys stay in their order: streamed in index order, they come out in it, and
    // write_indices has nothing to sort.
    const RankedKey<uint64_t> cutoff = key_at_rank(keys, n, kept - 1);
    size_t ties = kept - cutoff.larger;  // keys equal to the cutoff to keep (1 if all distinct)
    // A branch-free compaction to the front (the dropped keys need not survive, so no swaps).
    size_t out = 0;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t key = keys[i];
      const bool tie = key == cutoff.key && ties > 0;
      ties -= tie ? 1 : 0;
      keys[out] = key;
      out += key > cutoff.key || tie ? 1 : 0;
    }
  }
  if (sorted) std::sort(keys, keys + kept, std::greater<uint64_t>());
  return kept;
}

void write_indices(int32_t* out, uint64_t* keys, size_t count, int k, bool sorted) {
  bool ascending = true;
  int32_t previous = -1;
  for (size_t i = 0; i < count; ++i) {
    out[i] = rank_key_index(keys[i]);
    ascending &= out[i] > previous;
    previous = out[i];
  }
  if (!sorted && !ascending) {
    sort_indices(reinterpret_cast<uint32_t*>(out), count, reinterpret_cast<uint32_t*>(keys));
  }
  for (int i = static_cast<int>(count); i < k; ++i) out[i] = -1;
}

}  // namespace flashindexer::cpu
