// SPDX-License-Identifier: Apache-2.0
// The CPU selection core (cpu/select.h), white-box: keep_largest, write_indices and
// largest_at_rank against a full sort.
#include "cpu/topk/select.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "support/seed.h"

namespace fitest {
namespace {

// ----------------------------------------------------------------------------- selection core

// keep_largest (the selection behind every CPU top-k) against a full sort: random keys, keys
// sharing long prefixes (one score, neighbouring indices), a few distinct scores (large tie
// classes in the histogram's boundary bin), a tight cluster with far outliers (most keys in one
// bin), the extreme key values, and k from 0 to n; sizes on both sides of the histogram path.
TEST(SelectCore, KeepLargestEqualsTheSortedPrefix) {
  FI_SEEDED_RNG(rng);
  std::vector<std::vector<uint64_t>> inputs;
  for (size_t n : {1, 2, 3, 17, 300, 511, 512, 3000, 5000}) {
    std::vector<uint64_t> keys(n);
    for (uint64_t& key : keys) key = static_cast<uint64_t>(rng.bits32()) << 32 | rng.bits32();
    inputs.push_back(keys);
    for (size_t i = 0; i < n; ++i) {
      keys[i] = cpu::rank_key_of_score(1.5f, static_cast<uint32_t>(i * 7 % n));
    }
    inputs.push_back(keys);  // one score, distinct indices: only the low bits differ
    for (size_t i = 0; i < n; ++i) {
      keys[i] = cpu::rank_key_of_score(static_cast<float>(rng.uniform_int(0, 3)),
                                       static_cast<uint32_t>(i));
    }
    rng.shuffle(keys);
    inputs.push_back(keys);  // four scores
    for (size_t i = 0; i < n; ++i) {
      const float score = i % 97 == 0 ? -1e30f : 100.0f + 1e-5f * rng.normal();
      keys[i] = cpu::rank_key_of_score(score, static_cast<uint32_t>(i));
    }
    inputs.push_back(keys);  // a cluster and far outliers
  }
  inputs.push_back({0, ~uint64_t{0}, 1, ~uint64_t{0} - 1, uint64_t{1} << 63});
  for (const std::vector<uint64_t>& input : inputs) {
    std::vector<uint64_t> descending = input;
    std::sort(descending.begin(), descending.end(), std::greater<uint64_t>());
    for (size_t k = 0; k <= input.size(); k += 1 + input.size() / 7) {
      for (bool sorted : {false, true}) {
        std::vector<uint64_t> keys = input;
        ASSERT_EQ(cpu::keep_largest(keys.data(), keys.size(), k, sorted), k);
        keys.resize(k);
        if (!sorted) std::sort(keys.begin(), keys.end(), std::greater<uint64_t>());
        ASSERT_TRUE(std::equal(keys.begin(), keys.end(), descending.begin()))
            << "n=" << input.size() << " k=" << k << (sorted ? " sorted" : "");
      }
    }
  }
}

// write_indices: best first as given when sorted, else ascending (a radix sort of as many 11-bit
// digits as the largest index has: 1 to 3 passes; fewer than 64 indices by std::sort), then -1
// up to k.
TEST(SelectCore, WriteIndicesOrdersUnsortedAnswersByIndex) {
  FI_SEEDED_RNG(rng);
  for (uint32_t largest : {200u, 60000u, 5000000u, 0x7fffffffu}) {
    for (size_t count : {0, 1, 2, 255, 2048}) {
      SCOPED_TRACE(::testing::Message() << "largest=" << largest << " count=" << count);
      std::vector<uint64_t> keys(count);
      std::vector<int32_t> indices(count);
      for (size_t i = 0; i < count; ++i) {
        // Distinct indices; the largest one always there (its digits set the passes).
        const auto odd = static_cast<uint32_t>(rng.uniform_int(0, (largest - 1) / 2)) * 2 + 1;
        indices[i] = static_cast<int32_t>(i == 0 ? largest : odd);
      }
      std::sort(indices.begin(), indices.end());
      indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
      rng.shuffle(indices);
      for (size_t i = 0; i < indices.size(); ++i) {
        keys[i] = cpu::rank_key_of_score(rng.normal(), static_cast<uint32_t>(indices[i]));
      }
      const int k = static_cast<int>(count) + 3;
      for (bool sorted : {false, true}) {
        std::vector<uint64_t> scratch(keys.begin(), keys.begin() + indices.size());
        std::vector<int32_t> out(static_cast<size_t>(k), 12345);
        cpu::write_indices(out.data(), scratch.data(), indices.size(), k, sorted);
        std::vector<int32_t> expected = indices;
        if (!sorted) std::sort(expected.begin(), expected.end());
        expected.resize(static_cast<size_t>(k), -1);
        EXPECT_EQ(out, expected) << (sorted ? "sorted" : "unsorted");
      }
    }
  }
}

// largest_at_rank (the sampled floor's order statistic) against a full sort, with duplicates.
TEST(SelectCore, LargestAtRankEqualsTheSortedValue) {
  FI_SEEDED_RNG(rng);
  for (size_t n : {1, 5, 256, 257, 511, 512, 2048, 40000}) {
    for (uint32_t distinct : {1u, 7u, 0xFFFFFFFFu}) {
      std::vector<uint32_t> values(n);
      for (uint32_t& value : values) {
        value = distinct == 0xFFFFFFFFu ? rng.bits32() : 0x80000000u + rng.bits32() % distinct;
      }
      std::vector<uint32_t> descending = values;
      std::sort(descending.begin(), descending.end(), std::greater<uint32_t>());
      for (size_t rank = 0; rank < n; rank += 1 + n / 5) {
        std::vector<uint32_t> scratch = values;
        ASSERT_EQ(cpu::largest_at_rank(scratch.data(), n, rank), descending[rank])
            << "n=" << n << " distinct=" << distinct << " rank=" << rank;
      }
    }
  }
}

}  // namespace
}  // namespace fitest
