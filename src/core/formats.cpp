// SPDX-License-Identifier: Apache-2.0
#include "flashindexer/formats.h"

#include <cmath>
#include <cstring>

namespace flashindexer {
namespace {

uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}

float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

// ceil(log2(x)) for positive finite x, exact (frexp splits x = f * 2^p with f in [0.5, 1)).
int ceil_log2(float x) {
  int p = 0;
  const float f = std::frexp(x, &p);
  return f == 0.5f ? p - 1 : p;
}

constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float e4m3_to_float(uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::nanf("");
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

uint8_t float_to_e4m3(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7E;
  // Below the smallest normal (2^-6) the grid is uniform with step 2^-9; rounding there may
  // carry into code 0x08, which is exactly the smallest normal.
  if (a < std::ldexp(1.0f, -6)) {
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int p = 0;
  std::frexp(a, &p);  // a = f * 2^p, f in [0.5, 1): unbiased exponent p - 1
  int exponent = p - 1;
  int mantissa = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - exponent))) - 8;
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  const int field = exponent + 7;
  if (field > 15 || (field == 15 && mantissa == 7)) return sign | 0x7E;
  return sign | static_cast<uint8_t>(field << 3 | mantissa);
}

float e2m1_to_float(uint8_t code) {
  const float magnitude = kE2M1Magnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

uint8_t float_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Midpoints between neighbouring magnitudes; a tie goes to the even magnitude index.
  uint8_t index;
  if (a <= 0.25f)
    index = 0;
  else if (a < 0.75f)
    index = 1;
  else if (a <= 1.25f)
    index = 2;
  else if (a < 1.75f)
    index = 3;
  else if (a <= 2.5f)
    index = 4;
  else if (a < 3.5f)
    index = 5;
  else if (a <= 5.0f)
    index = 6;
  else
    index = 7;
  return sign | index;
}

float ue8m0_to_float(uint8_t byte) {
  if (byte == 0xFF) return std::nanf("");
  return std::ldexp(1.0f, static_cast<int>(byte) - 127);
}

uint8_t ue8m0_ceil(float x) {
  int e = ceil_log2(x);
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint8_t>(e + 127);
}

float pow2_ceil(float x) { return std::ldexp(1.0f, ceil_log2(x)); }

float bf16_to_float(uint16_t bits) { return bits_float(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_bf16(float x) {
  const uint32_t bits = float_bits(x);
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x40);
  const uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

}  // namespace flashindexer
