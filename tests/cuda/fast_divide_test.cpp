// SPDX-License-Identifier: Apache-2.0
// The row kernels' and the workspace gather's division by a launch-wide divisor
// (src/cuda/quantize/fast_divide.h) against the division itself, on the host (no GPU needed):
// every divisor up to 4096, the powers of two and their neighbours up to 2^31 - 1, random ones,
// each at the dividends where a quotient changes (multiples of the divisor and their
// neighbours, up to the largest dividend allowed) and at random ones.
#include "cuda/quantize/fast_divide.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace fitest {
namespace {

using flashindexer::cuda::quant::fast_divisor_fits;
using flashindexer::cuda::quant::FastDivisor;
using flashindexer::cuda::quant::FastDivisor64;

constexpr uint32_t kMaxDividend = FastDivisor::kMaxDividend;

// Dividends where floor(n / d) steps, near 0 and near the top of the range, and random ones.
std::vector<uint32_t> dividends(uint32_t d, std::mt19937_64& rng) {
  std::vector<uint32_t> n = {0, 1, 2, kMaxDividend, kMaxDividend - 1};
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, uint64_t{3}, uint64_t{kMaxDividend} / d,
                     uint64_t{kMaxDividend} / d - 1, uint64_t{kMaxDividend} / d / 2}) {
    for (int64_t delta = -1; delta <= 1; ++delta) {
      const int64_t v = static_cast<int64_t>(k * d) + delta;
      if (v >= 0 && v <= kMaxDividend) n.push_back(static_cast<uint32_t>(v));
    }
  }
  std::uniform_int_distribution<uint32_t> any(0, kMaxDividend);
  for (int i = 0; i < 64; ++i) n.push_back(any(rng));
  return n;
}

void expect_exact(uint32_t d, std::mt19937_64& rng) {
  const FastDivisor divisor(d);
  for (uint32_t n : dividends(d, rng)) {
    ASSERT_EQ(divisor.quotient(n), n / d) << n << " / " << d;
  }
}

TEST(FastDivisor, QuotientsAreExactForSmallDivisors) {
  std::mt19937_64 rng(1);
  for (uint32_t d = 1; d <= 4096; ++d) expect_exact(d, rng);
}

TEST(FastDivisor, QuotientsAreExactAroundPowersOfTwo) {
  std::mt19937_64 rng(2);
  for (int e = 1; e <= 31; ++e) {
    const int64_t p = int64_t{1} << e;
    for (int64_t d = p - 2; d <= p + 2; ++d) {
      if (d >= 1 && d <= kMaxDividend) expect_exact(static_cast<uint32_t>(d), rng);
    }
  }
  expect_exact(kMaxDividend, rng);
}

TEST(FastDivisor, QuotientsAreExactForRandomDivisors) {
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint32_t> any(1, kMaxDividend);
  for (int i = 0; i < 2000; ++i) expect_exact(any(rng), rng);
}

TEST(FastDivisor, EveryDividendOfSomeDivisors) {
  // Sweeps of consecutive dividends: no gap in the quotient's steps.
  for (uint32_t d : {3u, 7u, 48u, 100u, 127u, 641u}) {
    const FastDivisor divisor(d);
    for (uint32_t n = 0; n < (1u << 20); ++n) ASSERT_EQ(divisor.quotient(n), n / d) << n;
    for (uint32_t n = kMaxDividend - (1u << 20); n < kMaxDividend; ++n) {
      ASSERT_EQ(divisor.quotient(n), n / d) << n;
    }
  }
}

TEST(FastDivisor, TheDefaultDividesByOne) {
  const FastDivisor one;
  for (uint32_t n : {0u, 1u, 12345u, kMaxDividend}) EXPECT_EQ(one.quotient(n), n);
}

// 64-bit dividends (cache slots): steps near 0, near 2^32 and near the top of [0, 2^63).
void expect_exact_64(uint32_t d, std::mt19937_64& rng) {
  const FastDivisor64 divisor(d);
  constexpr uint64_t kTop = (uint64_t{1} << 63) - 1;
  std::vector<uint64_t> n = {0, 1, 2, kTop, kTop - 1, uint64_t{1} << 32, (uint64_t{1} << 32) - 1};
  for (uint64_t k : {uint64_t{1}, uint64_t{2}, (uint64_t{1} << 32) / d, kTop / d, kTop / d - 1}) {
    for (int64_t delta = -1; delta <= 1; ++delta) {
      const uint64_t v = k * d + static_cast<uint64_t>(delta);
      if (v <= kTop) n.push_back(v);
    }
  }
  std::uniform_int_distribution<uint64_t> any(0, kTop);
  std::uniform_int_distribution<uint64_t> small(0, uint64_t{1} << 36);
  for (int i = 0; i < 64; ++i) n.push_back(any(rng)), n.push_back(small(rng));
  for (uint64_t v : n) ASSERT_EQ(divisor.quotient(v), v / d) << v << " / " << d;
}

TEST(FastDivisor64, QuotientsAreExact) {
  std::mt19937_64 rng(4);
  for (uint32_t d = 1; d <= 4096; ++d) expect_exact_64(d, rng);
  for (int e = 1; e <= 31; ++e) {
    for (int64_t d = (int64_t{1} << e) - 2; d <= (int64_t{1} << e) + 2; ++d) {
      if (d >= 1 && d <= kMaxDividend) expect_exact_64(static_cast<uint32_t>(d), rng);
    }
  }
  std::uniform_int_distribution<uint32_t> any(1, kMaxDividend);
  for (int i = 0; i < 2000; ++i) expect_exact_64(any(rng), rng);
}

TEST(FastDivisor, DivisorsItTakes) {
  EXPECT_FALSE(fast_divisor_fits(0));
  EXPECT_TRUE(fast_divisor_fits(1));
  EXPECT_TRUE(fast_divisor_fits(kMaxDividend));
  EXPECT_FALSE(fast_divisor_fits(int64_t{kMaxDividend} + 1));
}

}  // namespace
}  // namespace fitest
