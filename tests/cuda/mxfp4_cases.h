// SPDX-License-Identifier: Apache-2.0
// MXFP4 operands that stress the CUDA conversion (tests/cuda): block-scale patterns applied to
// every n-th vector of an operand, and a decode problem's cache rewritten after its keys changed.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>

#include "support/kcache.h"
#include "support/operands.h"

namespace fitest {

constexpr int kMxfp4HeadDim = 128;
constexpr int kMxfp4Blocks = kMxfp4HeadDim / kMxfp4BlockSize;

// Block-scale patterns (bytes relative to 127) that stress the conversion: spans of 8 (normal),
// 14 (the widest exact one: the smallest values become e4m3 subnormals), 15 and 20 (out of span:
// the fix-up), a block of zeros under the largest byte (ignored when the span is taken), and
// values saturated at +-6 (E2M1's largest) under the vector's largest scale.
struct ScalePattern {
  int offsets[kMxfp4Blocks];
  bool zero_block;  // block 2's values cleared, its byte 254
  bool saturate;    // block 0's values all +-6
};
constexpr ScalePattern kPatterns[] = {
    {{3, -3, -5, 1}, false, false},  {{0, -14, 0, -2}, false, false},
    {{0, -15, -1, 0}, false, false}, {{2, -18, 2, -20}, false, false},
    {{-2, 0, 0, -1}, true, false},   {{4, 1, -9, 0}, false, true},
};

inline void apply_pattern(uint8_t* values, uint8_t* scales, int64_t i,
                          const ScalePattern& pattern) {
  constexpr int kBlockBytes = kMxfp4BlockSize / 2;
  for (int b = 0; b < kMxfp4Blocks; ++b) {
    scales[i * kMxfp4Blocks + b] = static_cast<uint8_t>(127 + pattern.offsets[b]);
  }
  uint8_t* vector = values + i * kMxfp4HeadDim / 2;
  if (pattern.zero_block) {
    std::memset(vector + 2 * kBlockBytes, 0, kBlockBytes);
    scales[i * kMxfp4Blocks + 2] = 254;
  }
  if (pattern.saturate) {
    // Code 7 is +6, 15 is -6: keep each nibble's sign.
    for (int j = 0; j < kBlockBytes; ++j) vector[j] = static_cast<uint8_t>(vector[j] | 0x77);
  }
}

// Every `every`-th vector (from `first`) of an operand gets the next pattern.
inline void spread_scales(Operand& operand, int64_t vectors, int64_t first, int64_t every) {
  int next = 0;
  for (int64_t i = first; i < vectors; i += every) {
    apply_pattern(operand.values.bytes(), operand.scales.bytes(), i,
                  kPatterns[next++ % std::size(kPatterns)]);
  }
}

// Rewrites a decode problem's cache from its request keys (after they were changed).
inline void rewrite_cache(DecodeProblem& p) {
  const int page_size = p.config.page_size;
  for (int b = 0; b < p.config.batch; ++b) {
    for (int64_t s = 0; s < p.stored[b]; ++s) {
      const int64_t page = p.block_table.at<int32_t>({b, s / page_size});
      p.cache.write_slot(page * page_size + s % page_size, p.request_keys[b], s);
    }
  }
}

inline void spread_decode(DecodeProblem& p, int heads) {
  for (Operand& keys : p.request_keys) spread_scales(keys, keys.values.size(0), 0, 5);
  rewrite_cache(p);
  spread_scales(p.q, p.rows() * heads, 1, 9);
}

}  // namespace fitest
