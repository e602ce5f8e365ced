// SPDX-License-Identifier: Apache-2.0
// The integer halves of the quantizers, on the float bits, shared by the CUDA kernels and the
// host tests that check them against src/core/formats.cpp over every float: E2M1 encoding (sm_90
// has no E2M1 conversion instruction; two forms) and the UE8M0 exponent of a positive float.
// Each gives exactly the bits of the CPU backend's function named beside it.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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

FI_HOST_DEVICE uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
#endif
}

FI_HOST_DEVICE float float_of(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
#endif
}

// float_to_e2m1 again (the same code for every float), without branches: the kernels' form,
// where e2m1_code's branches and compares cost more than the value's other work. |x| is first
// clamped to 8 (everything from 7 up encodes as 6, code 7). Adding 2^(22+k) to it in binade
// [2^k, 2^(k+1)) (k clamped to 0..2) rounds it, to nearest even, onto the E2M1 grid's step
// there (0.5 below 2, 1 in [2, 4), 2 in [4, 8]), and the sum's mantissa counts the steps: the
// code is that count plus 2k, at most 7. NaN is +0.
FI_HOST_DEVICE uint32_t e2m1_code_of(float x) {
  const uint32_t bits = bits_of(x);
  const bool nan = !(x == x);
  const float clamped = fminf(fabsf(x), 8.0f);  // NaN: 8, replaced below
  const int binade = static_cast<int>(bits_of(clamped) >> 23) - 127;
  const int k = binade < 0 ? 0 : (binade > 2 ? 2 : binade);
  const float magic = float_of(static_cast<uint32_t>(127 + 22 + k) << 23);
#if defined(__CUDA_ARCH__)
  const float sum = __fadd_rn(clamped, magic);
#else
  const float sum = clamped + magic;  // IEEE single addition, round to nearest even
#endif
  uint32_t index = (bits_of(sum) & 0x7FFFFFu) + 2u * static_cast<uint32_t>(k);
  index = index > 7u ? 7u : index;
  return nan ? 0u : (index | ((bits >> 28) & 0x8u));
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

// The UE8M0 scale byte of an MXFP4 block, ue8m0_ceil(max(amax, 6 x 2^-126) / 6), from the
// amax's bits without the division (a called sequence with a slow path, the largest part of a
// quantizing lane's scale work). amax is non-negative or -0, never NaN. x = max(amax, 6 x 2^-126)
// = 1.m x 2^a is normal, and x / 6 = (1.m / 1.5) x 2^(a - 2) rounds to a float inside binade
// a - 2 when 1.m > 1.5 (ceil(log2) a - 1), and otherwise to 2^(a - 2) or into binade a - 3 (ceil
// a - 2; the rounding never reaches the next power of two): the byte is x's exponent field - 2,
// plus 1 when its mantissa is above 0x400000, which adding 0x3FFFFF carries into the field. An
// infinite amax has frexp's exponent 0: byte 127.
FI_HOST_DEVICE uint32_t e2m1_scale_byte(uint32_t amax_bits) {
  constexpr uint32_t kSmallestBits = 0x01C00000u;  // 6 x 2^-126 = 1.5 x 2^-124
  uint32_t x = amax_bits & kAbsMask;
  x = x < kSmallestBits ? kSmallestBits : x;
  return x >= kInfBits ? 127u : ((x + 0x3FFFFFu) >> 23) - 2u;
}

}  // namespace flashindexer::codes
