// SPDX-License-Identifier: Apache-2.0
// The rank-key rule of src/core/rank_key.h on the host: score keys order like the total order
// of topk.h, the host's branch-free form agrees with the kernels' form, and key_threshold turns a
// key into the float compare the hot loops make.
#include "core/rank_key.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "support/tensors.h"

namespace fitest {
namespace {

using flashindexer::key_threshold;
using flashindexer::number_key;
using flashindexer::rank_key;
using flashindexer::rank_key_index;
using flashindexer::score_key;

uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// Every class of value: both zeros, subnormals, normals, the extremes, both infinities, NaNs of
// both signs and several payloads; then random bit patterns.
std::vector<uint32_t> key_test_bits(Rng& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  const float max = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  const float smallest = std::numeric_limits<float>::min();
  std::vector<uint32_t> bits;
  for (const float value : {0.0f, -0.0f, tiny, -tiny, smallest, -smallest, 1.0f, -1.0f, 1.5f, -1.5f,
                            max, -max, inf, -inf}) {
    bits.push_back(float_bits(value));
  }
  for (const uint32_t nan :
       {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu}) {
    bits.push_back(nan);
  }
  for (int i = 0; i < 4096; ++i) bits.push_back(rng.bits32());
  return bits;
}

bool is_nan_bits(uint32_t bits) { return (bits & 0x7FFFFFFFu) > 0x7F800000u; }

// a ranks strictly above b under topk.h's order (larger first, NaN below -inf, -0 == +0).
bool ranks_above(uint32_t a, uint32_t b) {
  if (is_nan_bits(a)) return false;
  if (is_nan_bits(b)) return true;
  return bits_float(a) > bits_float(b);
}

TEST(RankKey, ScoreKeysOrderLikeTheTotalOrder) {
  Rng rng(31);
  const std::vector<uint32_t> bits = key_test_bits(rng);
  for (const uint32_t a : bits) {
    if (is_nan_bits(a)) {
      EXPECT_EQ(score_key(a), 0u) << std::hex << a;
      continue;
    }
    // The host's branch-free form is the kernels' form on every number.
    EXPECT_EQ(score_key(a), number_key(a)) << std::hex << a;
    for (int i = 0; i < 64; ++i) {
      const uint32_t b = bits[rng.uniform_int(0, static_cast<int64_t>(bits.size()) - 1)];
      EXPECT_EQ(score_key(a) > score_key(b), ranks_above(a, b)) << std::hex << a << " " << b;
    }
  }
  EXPECT_EQ(score_key(float_bits(-0.0f)), score_key(float_bits(0.0f)));
  EXPECT_GT(score_key(float_bits(-std::numeric_limits<float>::infinity())), 0u);
}

TEST(RankKey, ThresholdAdmitsExactlyTheScoresAtOrAboveTheKey) {
  Rng rng(32);
  const std::vector<uint32_t> bits = key_test_bits(rng);
  for (const uint32_t t : bits) {
    const uint32_t key = score_key(t);
    if (key == 0) continue;  // NaN: no threshold
    const float threshold = key_threshold(key);
    for (const uint32_t x : bits) {
      if (is_nan_bits(x)) continue;
      EXPECT_EQ(score_key(x) >= key, bits_float(x) >= threshold) << std::hex << t << " " << x;
    }
  }
}

TEST(RankKey, EqualScoresRankTheSmallerIndexFirst) {
  const uint32_t key = score_key(float_bits(2.0f));
  EXPECT_GT(rank_key(key, 3), rank_key(key, 4));
  EXPECT_GT(rank_key(key + 1, 1000), rank_key(key, 0));
  for (const uint32_t index : {0u, 1u, 12345u, 0x7FFFFFFFu}) {
    EXPECT_EQ(rank_key_index(rank_key(key, index)), static_cast<int32_t>(index));
  }
}

}  // namespace
}  // namespace fitest
