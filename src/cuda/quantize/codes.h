// SPDX-License-Identifier: Apache-2.0
// The integer halves of the quantizers, on the float bits, shared by the CUDA kernels and the
// host tests that check them against src/core/formats.cpp over every float: E2M1 encoding (sm_90
// has no E2M1 conversion instruction), the UE8M0 exponent of a positive float and bf16 rounding.
// Each gives exactly the bits of the CPU backend's function named beside it.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashindexer::codes {

inline constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
inline constexpr uint32_t kInfBits = 0x7F800000u;

// float_to_e2m1: nearest even on {0, .5, 1, 1.5, 2, 3, 4, 6}, saturating; NaN -> +0.
FI_HOST_DEVICE uint32_t e2m1_code(uint32_t bits) {
  const uint32_t a = bits & kAbsMask;
  if (a > kInfBits) return 0;
  uint32_t index;
  if (a < 0x3F800000u) {
    // Below 1 the grid is 0, 0.5, 1: 0.25 (0x3E800000) ties to 0, 0.75 (0x3F400000) to 1.
    index = (a > 0x3E800000u ? 1u : 0u) + (a >= 0x3F400000u ? 1u : 0u);
  } else {
    // From 1 up the grid is the floats with one mantissa bit: round the bits to one mantissa
    // bit (nearest even; a carry moves into the exponent), then (exponent, bit) counts the
    // magnitude index from 1.0 = index 2.
    const uint32_t field = (a + 0x1FFFFFu + ((a >> 22) & 1u)) >> 22;
    index = field - 252u;
    if (index > 7u) index = 7u;
  }
  return ((bits >> 28) & 0x8u) | index;
}

// ceil(log2(x)) of a positive float as the CPU derives it from frexp: exact for finite x, and 0
// for an infinity or NaN (frexp's exponent of a non-finite value).
FI_HOST_DEVICE int ceil_log2(uint32_t bits) {
  const uint32_t a = bits & kAbsMask;
  const int exponent_field = static_cast<int>(a >> 23);
  const uint32_t mantissa = a & 0x7FFFFFu;
  if (exponent_field == 0xFF) return 0;
  if (exponent_field == 0) {
    // Subnormal m * 2^-149: the position of m's top bit, plus one unless m is a power of two.
    int top = 31;
    while (top > 0 && ((mantissa >> top) & 1u) == 0) --top;
    return top - 149 + ((mantissa & (mantissa - 1u)) != 0 ? 1 : 0);
  }
  return exponent_field - 127 + (mantissa != 0 ? 1 : 0);
}

// The bits of 2^e for e in [-149, 127].
FI_HOST_DEVICE uint32_t pow2_bits(int e) {
  return e >= -126 ? static_cast<uint32_t>(e + 127) << 23 : 1u << (e + 149);
}

// ue8m0_ceil: ceil(log2(x)) clamped to [-127, 127], plus 127.
FI_HOST_DEVICE uint32_t ue8m0_byte(uint32_t bits) {
  int e = ceil_log2(bits);
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<uint32_t>(e + 127);
}

// float_to_bf16: nearest even; a NaN keeps its upper bits and is made quiet.
FI_HOST_DEVICE uint32_t bf16_bits(uint32_t bits) {
  if ((bits & kAbsMask) > kInfBits) return (bits >> 16) | 0x40u;
  return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

}  // namespace flashindexer::codes
