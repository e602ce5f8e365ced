// SPDX-License-Identifier: Apache-2.0
// Scalar number formats of the indexer (spec §3): FP8 e4m3fn, MXFP4 E2M1, UE8M0 scales, bf16.
//
// Decoding is exact. Encoding rounds to nearest, ties to even, and saturates to the largest
// finite value, which is what the quantizers of the serving engines do.
#pragma once

#include <cstdint>

namespace flashindexer {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr int kMxfp4BlockSize = 32;  // elements sharing one UE8M0 scale

// e4m3fn: 0x7f and 0xff are NaN; there is no infinity.
float e4m3_to_float(uint8_t code);
// Round to nearest even; |x| beyond 448 saturates to +-448; NaN maps to 0x7f.
uint8_t float_to_e4m3(float x);

// E2M1 code (4 bits): sign<<3 | magnitude index into {0, .5, 1, 1.5, 2, 3, 4, 6}.
float e2m1_to_float(uint8_t code);
// Round to nearest even on the E2M1 grid, saturating to +-6; NaN maps to +0.
uint8_t float_to_e2m1(float x);

// UE8M0: value 2^(byte - 127). Byte 255 is NaN in OCP MX; it is never produced here.
float ue8m0_to_float(uint8_t byte);
// The smallest power-of-two exponent e with 2^e >= x, clamped to [-127, 127], as a byte
// e + 127. x must be positive and finite.
uint8_t ue8m0_ceil(float x);
// 2^ceil(log2(x)) computed on the bits (spec §3.1), for positive finite x.
float pow2_ceil(float x);

float bf16_to_float(uint16_t bits);
// Round to nearest even; NaN stays NaN.
uint16_t float_to_bf16(float x);

}  // namespace flashindexer
