#include "cpu/select.h"

#include <algorithm>
#include <functional>

namespace flashindexer::cpu {

size_t keep_largest(uint64_t* keys, size_t n, size_t k, bool sorted) {
  const size_t kept = std::min(n, k);
  if (kept < n) std::nth_element(keys, keys + kept - 1, keys + n, std::greater<uint64_t>());
  if (sorted) std::sort(keys, keys + kept, std::greater<uint64_t>());
  return kept;
}

void write_indices(int32_t* out, const uint64_t* keys, size_t count, int k) {
  for (size_t i = 0; i < count; ++i) out[i] = rank_key_index(keys[i]);
  for (int i = static_cast<int>(count); i < k; ++i) out[i] = -1;
}

}  // namespace flashindexer::cpu
