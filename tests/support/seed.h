// SPDX-License-Identifier: Apache-2.0
// Seeded randomness of the tests.
//
// Every randomized test starts with FI_SEEDED_RNG(rng): the seed is drawn fresh from
// std::random_device (or read from the environment variable FLASHINDEXER_TEST_SEED) and is
// printed with every failure of that test, so any failure can be replayed exactly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

#include "flashindexer/flashindexer.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Seeds

inline uint64_t test_seed() {
  if (const char* env = std::getenv("FLASHINDEXER_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 0);
  }
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform integer in [lo, hi] (both inclusive).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  float normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(engine_); }
  bool bernoulli(double p) { return std::bernoulli_distribution(p)(engine_); }
  uint32_t bits32() { return static_cast<uint32_t>(engine_()); }
  template <typename T>
  void shuffle(std::vector<T>& items) {
    std::shuffle(items.begin(), items.end(), engine_);
  }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(items.size()) - 1))];
  }

 private:
  std::mt19937_64 engine_;
};

// Declares `Rng rng` seeded freshly and attaches the seed to every failure in the scope.
#define FI_SEEDED_RNG(rng)                                                                        \
  const uint64_t rng##_seed = ::fitest::test_seed();                                              \
  SCOPED_TRACE(::testing::Message() << "random seed " << rng##_seed                               \
                                    << " (replay: FLASHINDEXER_TEST_SEED=" << rng##_seed << ")"); \
  ::fitest::Rng rng(rng##_seed)

}  // namespace fitest
