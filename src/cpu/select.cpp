#include "cpu/select.h"

#include <algorithm>
#include <cstdint>
#include <functional>

namespace flashindexer::cpu {
namespace {

// Below this many keys nth_element alone is cheaper than zeroing and scanning the histogram.
constexpr size_t kHistogramMinKeys = 512;
constexpr uint32_t kBins = 2048;

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

}  // namespace

uint32_t largest_at_rank(uint32_t* values, size_t n, size_t rank) {
  if (rank + 1 < n) {
    move_largest_to_front(values, n, rank + 1, [](uint32_t value) { return value; });
  }
  return *std::min_element(values, values + std::min(n, rank + 1));
}

size_t keep_largest(uint64_t* keys, size_t n, size_t k, bool sorted) {
  const size_t kept = std::min(n, k);
  if (kept < n) {
    move_largest_to_front(keys, n, kept,
                          [](uint64_t key) { return static_cast<uint32_t>(key >> 32); });
  }
  if (sorted) std::sort(keys, keys + kept, std::greater<uint64_t>());
  return kept;
}

void write_indices(int32_t* out, const uint64_t* keys, size_t count, int k) {
  for (size_t i = 0; i < count; ++i) out[i] = rank_key_index(keys[i]);
  for (int i = static_cast<int>(count); i < k; ++i) out[i] = -1;
}

}  // namespace flashindexer::cpu
