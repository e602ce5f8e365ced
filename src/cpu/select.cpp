#include "cpu/select.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace flashindexer::cpu {
namespace {

// Below this many keys nth_element alone is cheaper than zeroing and scanning the histogram.
constexpr size_t kHistogramMinKeys = 512;
constexpr int kBinBits = 11;
constexpr uint32_t kBins = 1u << kBinBits;

// Moves the keys that satisfy `pred` to the front of [first, last) and returns the end of them;
// the order on either side is unspecified but fixed by the input. Branch-free (every step
// swaps, and advances when pred holds): here pred is a coin flip for a branch predictor, and
// std::partition's mispredictions cost more than the selection's other passes together.
template <typename Key, typename Pred>
Key* partition_branch_free(Key* first, Key* last, Pred pred) {
  Key* out = first;
  for (Key* it = first; it != last; ++it) {
    const Key value = *it;
    *it = *out;
    *out = value;
    out += pred(value) ? 1 : 0;
  }
  return out;
}

// Moves the `kept` largest of keys[0, n) to the front, in no particular order (0 < kept < n).
// One histogram of the score bits over their occupied range finds the bin that holds the
// kept-th largest; the keys above that bin go first, then the bin's own keys, among which
// nth_element takes the rest. A few linear passes, where nth_element over all the keys runs
// several partitions whose comparisons mispredict about as often as not.
template <typename Key, typename Score>
void move_largest_to_front(Key* keys, size_t n, size_t kept, Score score) {
  if (n < kHistogramMinKeys) {
    std::nth_element(keys, keys + kept - 1, keys + n, std::greater<Key>());
    return;
  }
  uint32_t lowest = UINT32_MAX;
  uint32_t highest = 0;
  for (size_t i = 0; i < n; ++i) {
    lowest = std::min(lowest, score(keys[i]));
    highest = std::max(highest, score(keys[i]));
  }
  int shift = 0;
  while (((highest - lowest) >> shift) >= kBins) ++shift;
  const auto bin_of = [&](Key key) { return (score(key) - lowest) >> shift; };
  uint32_t counts[kBins] = {};
  for (size_t i = 0; i < n; ++i) ++counts[bin_of(keys[i])];
  // The bins from the top until the kept-th key; all n keys are in bins <= the top one.
  uint32_t bin = (highest - lowest) >> shift;
  size_t above = 0;
  while (above + counts[bin] < kept) above += counts[bin--];
  Key* const boundary =
      partition_branch_free(keys, keys + n, [&](Key key) { return bin_of(key) > bin; });
  Key* const boundary_end =
      partition_branch_free(boundary, keys + n, [&](Key key) { return bin_of(key) == bin; });
  std::nth_element(boundary, boundary + (kept - above) - 1, boundary_end, std::greater<Key>());
}

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
    for (int pass = 0; pass < kPasses; ++pass) ++counts[pass][(value >> (pass * kDigitBits)) & kMask];
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

// The key of rank `rank` (0 = the largest) among keys[0, n), and how many keys are larger;
// reads only. A histogram of kBins bins over the occupied range [lo, hi], then the same inside
// the bin that holds the rank, until that bin holds at most kGatherMax keys, which nth_element
// ranks in a small array: usually two passes over the keys and a few gathered.
struct RankedKey {
  uint64_t key;
  size_t larger;
};
constexpr size_t kGatherMax = 256;

RankedKey key_at_rank(const uint64_t* keys, size_t n, size_t rank) {
  // The range from the score bits alone (32-bit minima and maxima vectorize; 64-bit ones did
  // not); the index bits then span all of it.
  uint32_t lowest = UINT32_MAX;
  uint32_t highest = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto score = static_cast<uint32_t>(keys[i] >> 32);
    lowest = std::min(lowest, score);
    highest = std::max(highest, score);
  }
  uint64_t lo = static_cast<uint64_t>(lowest) << 32;
  uint64_t hi = static_cast<uint64_t>(highest) << 32 | 0xffffffffu;
  size_t in_range = n;  // keys in [lo, hi]
  size_t larger = 0;    // keys above hi
  while (in_range > kGatherMax && hi > lo) {
    const int bits = 64 - __builtin_clzll(hi - lo);
    const int shift = bits > kBinBits ? bits - kBinBits : 0;
    uint32_t counts[kBins] = {};
    for (size_t i = 0; i < n; ++i) {
      const uint64_t offset = keys[i] - lo;  // wraps for keys below lo
      if (offset <= hi - lo) ++counts[offset >> shift];
    }
    uint32_t bin = static_cast<uint32_t>((hi - lo) >> shift);
    while (larger + counts[bin] <= rank) larger += counts[bin--];
    in_range = counts[bin];
    lo += static_cast<uint64_t>(bin) << shift;
    hi = std::min(hi, lo + ((uint64_t{1} << shift) - 1));
  }
  if (in_range > kGatherMax) return {lo, larger};  // hi == lo: all of them equal
  // Branch-free: whether a key is in range is a coin flip near the cutoff, and a branch on it
  // mispredicted often enough to double the selection's time.
  uint64_t gathered[kGatherMax + 1];
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    gathered[count] = keys[i];
    count += keys[i] - lo <= hi - lo ? 1 : 0;
  }
  uint64_t* const at = gathered + (rank - larger);
  std::nth_element(gathered, at, gathered + count, std::greater<uint64_t>());
  const uint64_t key = *at;
  for (size_t i = 0; i < count; ++i) larger += gathered[i] > key ? 1 : 0;
  return {key, larger};
}

}  // namespace

uint32_t largest_at_rank(uint32_t* values, size_t n, size_t rank) {
  if (rank + 1 < n) {
    move_largest_to_front(values, n, rank + 1, [](uint32_t value) { return value; });
  }
  return *std::min_element(values, values + std::min(n, rank + 1));
}

size_t keep_largest(uint64_t* keys, size_t n, size_t k, bool sorted) {
  const size_t kept = std::min(n, k);
  if (kept == 0) return 0;
  if (kept < n) {
    // The kept keys stay in their order: streamed in index order, they come out in it, and
    // write_indices has nothing to sort.
    const RankedKey cutoff = key_at_rank(keys, n, kept - 1);
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
