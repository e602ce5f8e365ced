// SPDX-License-Identifier: Apache-2.0
// Scores as 32-bit keys that order like the total order of topk.h (larger key = better): the
// full fp32 bits (bf16 is the upper half of fp32), -0.0 mapped to +0.0, every NaN mapped to 0,
// below -inf. A *rank key* appends the inverted index, (key << 32) | ~index, so that equal scores
// rank the smaller index first and all rank keys of a row are distinct: the k largest rank keys
// are a unique set, and every selection algorithm of every backend returns the same one.
//
// The one definition for the CPU backend, the DCP merge and (through cuda/common/rank_key.cuh)
// the top-k kernels and the fused indexer's candidate emission.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace flashindexer {

// score_key of a score known not to be NaN (one that passed a >= compare with a float): the
// hot loops' survivors skip the NaN test.
FI_HOST_DEVICE uint32_t number_key(uint32_t bits) {
  bits = bits == 0x80000000u ? 0u : bits;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// The same mapping written twice, each as its compiler does best: the kernels' form (ptxas turns
// it into selects), and on the host a branch-free one (scores are random, so a branch on the
// sign mispredicts half the time, and this form vectorizes): sign set -> ~bits, sign clear ->
// bits | 0x80000000, then -0 -> +0 and NaN -> 0. tests/cpp check the host form on every class of
// value against the total order.
FI_HOST_DEVICE uint32_t score_key(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  const uint32_t key = number_key(bits);
  return is_nan ? 0u : key;
#else
  uint32_t key = bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) | 0x80000000u);
  key += bits == 0x80000000u;  // -0: 0x7fffffff + 1 = the key of +0
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  return is_nan ? 0u : key;
#endif
}

// The float t with score_key(x) >= key exactly when x >= t, for every non-NaN x, given key > 0
// (NaN scores, key 0, lie below it): hot loops compare the scores themselves with t. Keys at or
// below that of -inf take t = -inf.
FI_HOST_DEVICE float key_threshold(uint32_t key) {
  const uint32_t bits = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
#if defined(__CUDA_ARCH__)
  return __uint_as_float(key <= 0x007fffffu ? 0xff800000u : bits);
#else
  const uint32_t threshold = key <= 0x007fffffu ? 0xff800000u : bits;
  float value;
  std::memcpy(&value, &threshold, sizeof value);
  return value;
#endif
}

FI_HOST_DEVICE uint64_t rank_key(uint32_t key, uint32_t index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~index);
}

FI_HOST_DEVICE int32_t rank_key_index(uint64_t rank) {
  return static_cast<int32_t>(~static_cast<uint32_t>(rank));
}

}  // namespace flashindexer
