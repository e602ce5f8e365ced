// SPDX-License-Identifier: Apache-2.0
// Division by a divisor fixed for a whole launch (heads per token, keys per page, chunks per
// key) as a multiply-high, an add and a shift: a run-time 32-bit division is some twenty
// instructions on the GPU (there is no divide instruction), and the row kernels needed several a
// row on every lane. The host builds the constants; the device and the host tests (which check
// the quotient against the division) share the arithmetic.
//
// With s = ceil(log2(d)) and m = floor(2^32 (2^s - d) / d) + 1, the 33-bit multiplier 2^32 + m
// gives floor(n / d) = (umulhi(n, m) + n) >> s for every 32-bit n (Granlund and Montgomery,
// "Division by invariant integers using multiplication", 1994). For n < 2^31 the sum fits 32
// bits, so callers keep the dividends below 2^31 (kMaxDividend). FastDivisor64 is the same for
// 64-bit dividends below 2^63 (cache slots, which may number more than 2^31).
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashindexer::cuda::quant {

struct FastDivisor {
  static constexpr uint32_t kMaxDividend = 0x7FFFFFFFu;  // n must stay at or below this
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  FastDivisor() = default;
  // divisor in [1, 2^31).
  explicit FastDivisor(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    multiplier = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1);
  }

  FI_HOST_DEVICE uint32_t quotient(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t high = __umulhi(n, multiplier);
#else
    const auto high = static_cast<uint32_t>((static_cast<uint64_t>(n) * multiplier) >> 32);
#endif
    return (high + n) >> shift;
  }
};

struct FastDivisor64 {
  uint64_t divisor = 1;
  uint64_t multiplier = 0;
  uint32_t shift = 0;

  FastDivisor64() = default;
  // divisor in [1, 2^31) (a page size).
  explicit FastDivisor64(uint32_t d) : divisor(d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    using Wide = unsigned __int128;
    multiplier = static_cast<uint64_t>((Wide{1} << 64) * ((Wide{1} << shift) - d) / d + 1);
  }

  // n in [0, 2^63).
  FI_HOST_DEVICE uint64_t quotient(uint64_t n) const {
#if defined(__CUDA_ARCH__)
    const uint64_t high = __umul64hi(n, multiplier);
#else
    const auto high = static_cast<uint64_t>((static_cast<unsigned __int128>(n) * multiplier) >> 64);
#endif
    return (high + n) >> shift;
  }
};

// Whether a divisor is one FastDivisor takes.
inline bool fast_divisor_fits(int64_t d) { return d >= 1 && d <= FastDivisor::kMaxDividend; }

}  // namespace flashindexer::cuda::quant
