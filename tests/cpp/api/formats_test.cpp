// SPDX-License-Identifier: Apache-2.0
// Scalar formats (formats.h, spec §3): exact decoding, round-to-nearest-even saturating encoding.
#include <cmath>
#include <cstdint>
#include <limits>

#include "support/tensors.h"

namespace fitest {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// ----------------------------------------------------------------------------- FP8 e4m3fn

TEST(Formats, E4M3RoundTripsEveryCode) {
  for (int code = 0; code < 256; ++code) {
    SCOPED_TRACE(::testing::Message() << "code 0x" << std::hex << code);
    const float value = e4m3_to_float(static_cast<uint8_t>(code));
    const uint8_t back = float_to_e4m3(value);
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value));
      EXPECT_EQ(back, 0x7F) << "NaN must encode to the canonical 0x7f";
    } else {
      EXPECT_FALSE(std::isnan(value));
      EXPECT_EQ(back, code);
    }
  }
}

TEST(Formats, E4M3NegativeZeroCodeDecodesToNegativeZero) {
  const float value = e4m3_to_float(0x80);
  EXPECT_EQ(value, 0.0f);
  EXPECT_TRUE(std::signbit(value));
  EXPECT_FALSE(std::signbit(e4m3_to_float(0x00)));
}

TEST(Formats, E4M3DecodesTheSpecifiedGrid) {
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);                  // bias 7
  EXPECT_EQ(e4m3_to_float(0x3C), 1.5f);
  EXPECT_EQ(e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), kE4M3Max);  // 448, the largest finite
  EXPECT_EQ(e4m3_to_float(0xFE), -kE4M3Max);
  EXPECT_EQ(e4m3_to_float(0xB8), -1.0f);
  // No infinities: 0x78 (exponent field 15, mantissa 0) is the finite 256.
  EXPECT_EQ(e4m3_to_float(0x78), 256.0f);
  for (int code = 0; code < 0x7E; ++code) {
    EXPECT_LT(e4m3_to_float(static_cast<uint8_t>(code)),
              e4m3_to_float(static_cast<uint8_t>(code + 1)))
        << "positive codes must decode in increasing order at 0x" << std::hex << code;
    EXPECT_EQ(e4m3_to_float(static_cast<uint8_t>(code | 0x80)),
              -e4m3_to_float(static_cast<uint8_t>(code)));
  }
}

TEST(Formats, E4M3EncodeRoundsMidpointsToEven) {
  for (int code = 0; code < 0x7E; ++code) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(code));
    const float hi = e4m3_to_float(static_cast<uint8_t>(code + 1));
    const float mid = (lo + hi) / 2;  // exact: both have at most 4 significant bits
    // The low code bit is the low mantissa bit, so the even neighbour has an even code.
    const int even = (code % 2 == 0) ? code : code + 1;
    SCOPED_TRACE(::testing::Message() << "between 0x" << std::hex << code << " and 0x" << code + 1
                                      << std::dec << " midpoint " << mid);
    EXPECT_EQ(float_to_e4m3(mid), even);
    EXPECT_EQ(float_to_e4m3(-mid), 0x80 | even);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, kInf)), code + 1);
    EXPECT_EQ(float_to_e4m3(std::nextafter(mid, -kInf)), code == 0 ? 0 : code)
        << "just below a midpoint rounds down";
    // Interior points of the interval round to the nearer code.
    EXPECT_EQ(float_to_e4m3(lo + (hi - lo) / 4), code);
    EXPECT_EQ(float_to_e4m3(hi - (hi - lo) / 4), code + 1);
  }
}

TEST(Formats, E4M3EncodeSaturatesBeyondMax) {
  EXPECT_EQ(float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(449.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(479.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(480.0f), 0x7E);
  EXPECT_EQ(float_to_e4m3(1e9f), 0x7E);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(float_to_e4m3(kInf), 0x7E);
  EXPECT_EQ(float_to_e4m3(-464.0f), 0xFE);
  EXPECT_EQ(float_to_e4m3(-1e9f), 0xFE);
  EXPECT_EQ(float_to_e4m3(-kInf), 0xFE);
}

TEST(Formats, E4M3EncodeMapsNanToCanonicalNan) {
  EXPECT_EQ(float_to_e4m3(kNan), 0x7F);
  EXPECT_EQ(float_to_e4m3(-kNan), 0x7F);
  EXPECT_EQ(float_to_e4m3(bits_float(0x7F800001u)), 0x7F);
}

TEST(Formats, E4M3EncodeIsNearestOnRandomFloats) {
  FI_SEEDED_RNG(rng);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(rng.uniform(-460.0, 460.0)) *
                    std::ldexp(1.0f, -static_cast<int>(rng.uniform_int(0, 14)));
    const uint8_t code = float_to_e4m3(x);
    const float decoded = e4m3_to_float(code);
    ASSERT_EQ(std::signbit(decoded), std::signbit(x)) << x;
    const double error = std::fabs(static_cast<double>(decoded) - x);
    // No other finite code is strictly nearer.
    for (int other = 0; other < 256; ++other) {
      if ((other & 0x7F) == 0x7F) continue;
      const double other_error =
          std::fabs(static_cast<double>(e4m3_to_float(static_cast<uint8_t>(other))) - x);
      ASSERT_LE(error, other_error) << "x=" << x << " encoded as 0x" << std::hex << int{code}
                                    << " but 0x" << other << " is nearer";
    }
  }
}

// ----------------------------------------------------------------------------- E2M1

TEST(Formats, E2M1RoundTripsEveryCode) {
  const float magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int code = 0; code < 16; ++code) {
    SCOPED_TRACE(::testing::Message() << "code 0x" << std::hex << code);
    const float value = e2m1_to_float(static_cast<uint8_t>(code));
    const float expected = (code & 0x8) ? -magnitudes[code & 7] : magnitudes[code & 7];
    EXPECT_EQ(value, expected);
    if (code == 0x8) {
      EXPECT_EQ(value, 0.0f) << "code 0x8 is -0 and decodes to 0";
      EXPECT_EQ(e2m1_to_float(float_to_e2m1(value)), 0.0f);
    } else {
      EXPECT_EQ(float_to_e2m1(value), code);
    }
  }
}

TEST(Formats, E2M1EncodeRoundsMidpointsToEvenAndSaturates) {
  struct Case {
    float x;
    float expected;
  };
  const Case cases[] = {
      {0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},  {2.5f, 2.0f},  {3.5f, 4.0f},
      {5.0f, 4.0f},  {6.0f, 6.0f},  {7.0f, 6.0f},  {100.0f, 6.0f}, {1e30f, 6.0f}, {kInf, 6.0f},
      {0.2f, 0.0f},  {0.3f, 0.5f},  {2.6f, 3.0f},  {5.1f, 6.0f},   {4.9f, 4.0f},  {0.0f, 0.0f},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(c.x)), c.expected) << "x=" << c.x;
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(-c.x)), -c.expected) << "x=" << -c.x;
  }
  // Just off each midpoint the nearer neighbour wins.
  const float grid[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i < 7; ++i) {
    const float mid = (grid[i] + grid[i + 1]) / 2;
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(std::nextafter(mid, kInf))), grid[i + 1]) << mid;
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(std::nextafter(mid, 0.0f))), grid[i]) << mid;
    EXPECT_EQ(float_to_e2m1(mid) & 1, 0) << "a tie at " << mid << " goes to the even index";
  }
}

TEST(Formats, E2M1EncodeMapsNanToPositiveZero) {
  EXPECT_EQ(float_to_e2m1(kNan), 0);
  EXPECT_EQ(float_to_e2m1(-kNan), 0);
}

// ----------------------------------------------------------------------------- UE8M0

TEST(Formats, UE8M0RoundTripsEveryFiniteByte) {
  for (int byte = 0; byte <= 254; ++byte) {
    SCOPED_TRACE(::testing::Message() << "byte " << byte);
    const float value = ue8m0_to_float(static_cast<uint8_t>(byte));
    EXPECT_EQ(value, std::ldexp(1.0f, byte - 127));
    EXPECT_EQ(ue8m0_ceil(value), byte);
  }
}

TEST(Formats, UE8M0CeilRoundsUpBetweenPowersAndClamps) {
  for (int e = -127; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    SCOPED_TRACE(::testing::Message() << "2^" << e);
    EXPECT_EQ(ue8m0_ceil(p), e + 127);
    EXPECT_EQ(ue8m0_ceil(std::nextafter(p, kInf)), std::min(e + 128, 254));
    EXPECT_EQ(ue8m0_ceil(std::nextafter(p, 0.0f)), std::max(e + 127, 0));
    if (e < 127) {
      EXPECT_EQ(ue8m0_ceil(p * 1.5f), e + 128);
    }
  }
  EXPECT_EQ(ue8m0_ceil(std::numeric_limits<float>::denorm_min()), 0) << "clamped to 2^-127";
  EXPECT_EQ(ue8m0_ceil(std::ldexp(1.0f, -140)), 0);
  EXPECT_EQ(ue8m0_ceil(std::numeric_limits<float>::max()), 254) << "clamped to 2^127";
  EXPECT_EQ(ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(ue8m0_ceil(6.0f), 130);
  EXPECT_EQ(ue8m0_ceil(1.0f / 6.0f), 125);
}

TEST(Formats, Pow2CeilIsExactOnPowersAndRoundsUpNeighbours) {
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.0f, e);
    SCOPED_TRACE(::testing::Message() << "2^" << e);
    EXPECT_EQ(pow2_ceil(p), p);
    // Neighbours are checked where the float grid is fine enough to have them (normals).
    if (e < -125) continue;
    EXPECT_EQ(pow2_ceil(std::nextafter(p, 0.0f)), p) << "just below a power";
    if (e < 127) {
      EXPECT_EQ(pow2_ceil(std::nextafter(p, kInf)), std::ldexp(1.0f, e + 1)) << "just above";
      EXPECT_EQ(pow2_ceil(p * 1.75f), std::ldexp(1.0f, e + 1));
    }
  }
  EXPECT_EQ(pow2_ceil(1e-4f / 448.0f), std::ldexp(1.0f, -22));
  EXPECT_EQ(pow2_ceil(3.0f), 4.0f);
  EXPECT_EQ(pow2_ceil(0.3f), 0.5f);
}

// ----------------------------------------------------------------------------- bf16

TEST(Formats, Bf16RoundTripsRandomBits) {
  FI_SEEDED_RNG(rng);
  for (int i = 0; i < 100000; ++i) {
    const uint16_t bits = static_cast<uint16_t>(rng.bits32());
    const float value = bf16_to_float(bits);
    ASSERT_EQ(float_bits(value), static_cast<uint32_t>(bits) << 16)
        << "decode of 0x" << std::hex << bits;
    if (std::isnan(value)) {
      ASSERT_TRUE(std::isnan(bf16_to_float(float_to_bf16(value)))) << std::hex << bits;
    } else {
      ASSERT_EQ(float_to_bf16(value), bits) << "0x" << std::hex << bits;
    }
  }
}

TEST(Formats, Bf16EncodeRoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000u)), 0x3F80) << "tie, even below";
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000u)), 0x3F82) << "tie, even above";
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(bits_float(0x3F807FFFu)), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_float(0xBF808000u)), 0xBF80);
  EXPECT_EQ(float_to_bf16(bits_float(0xBF818000u)), 0xBF82);
  FI_SEEDED_RNG(rng);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = rng.bits32();
    const float x = bits_float(bits);
    if (!std::isfinite(x)) continue;
    // Within a sign, bit patterns order magnitudes, so RNE acts on the low 16 bits.
    const uint32_t truncated = bits >> 16;
    const uint32_t rest = bits & 0xFFFF;
    uint32_t expected = truncated;
    if (rest > 0x8000 || (rest == 0x8000 && (truncated & 1))) expected = truncated + 1;
    ASSERT_EQ(float_to_bf16(x), expected) << "x bits 0x" << std::hex << bits;
  }
}

TEST(Formats, Bf16EncodeKeepsNanNan) {
  for (uint32_t bits : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7F80FFFFu, 0xFF800001u}) {
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(bits_float(bits))))) << std::hex << bits;
  }
  EXPECT_EQ(float_to_bf16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
}

}  // namespace
}  // namespace fitest
