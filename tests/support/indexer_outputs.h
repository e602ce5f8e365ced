// SPDX-License-Identifier: Apache-2.0
// The indexer's optional outputs (IndexerOptions::scores, ::candidate_source), shared by the CPU
// (tests/cpp/api/indexer_outputs_test.cpp) and GPU (tests/cuda/indexer_outputs_test.cpp) tests:
// prefill chunks of several requests with unaligned starts, inputs that tie and overflow, and the
// checks of the scores against the logits op's bits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "support/compare.h"

namespace fitest {

// A poisoned f32 scores output [rows, cols] (row stride row_stride, 0 = contiguous).
inline HostTensor poisoned_scores(int64_t rows, int64_t cols, int64_t row_stride = 0) {
  HostTensor scores(DType::kF32, {rows, cols}, row_stride);
  scores.fill<uint32_t>(kPoisonLogitBits);
  return scores;
}

// Rows of a prefill chunk packing several requests one after another, as an engine lays them:
// request j's keys at [cu[j], cu[j + 1]), each row seeing a prefix of its request's keys (its
// causal bound). The starts are unaligned; some rows see nothing, one key, or less than a block.
inline void pack_requests(Rng& rng, PrefillProblem& p, int short_rows_below) {
  const int64_t requests = std::min<int64_t>(rng.uniform_int(1, 4), std::max<int64_t>(p.rows, 1));
  std::vector<int64_t> cu{0, p.num_keys};
  for (int64_t j = 1; j < requests; ++j) cu.push_back(rng.uniform_int(1, p.num_keys - 1));
  std::sort(cu.begin(), cu.end());
  for (int64_t t = 0; t < p.rows; ++t) {
    const int64_t j = t * requests / std::max<int64_t>(p.rows, 1);
    const int64_t start = cu[j];
    const int64_t length = cu[j + 1] - start;
    int64_t seen = rng.uniform_int(0, length);
    if (t % 7 == 1) seen = std::min<int64_t>(length, rng.uniform_int(0, short_rows_below));
    if (t % 7 == 2) seen = length;
    p.ks.data<int32_t>()[t] = static_cast<int32_t>(start);
    p.ke.data<int32_t>()[t] = static_cast<int32_t>(start + seen);
  }
}

// Inputs the quantized operands allow beyond random scores: all-zero keys (scores of exactly 0
// on every row: heavy ties) and, when `huge`, weights near the fp32 limit, so that head sums
// overflow to +-inf and, with weights of both signs, +inf + -inf = NaN.
inline void zero_keys(Rng& rng, Operand& keys, KFormat format, int head_dim, int64_t num_keys,
                      int64_t count) {
  const int64_t vb = value_bytes_per_row(format, head_dim);
  for (int64_t i = 0; i < count && num_keys > 0; ++i) {
    std::memset(keys.values.bytes() + rng.uniform_int(0, num_keys - 1) * vb, 0, vb);
  }
}
inline void huge_weights(Rng& rng, HostTensor& weights, int64_t rows_with) {
  const int64_t heads = weights.size(1);
  for (int64_t t = 0; t < std::min(rows_with, weights.size(0)); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      weights.at<float>({t, h}) =
          (rng.bernoulli(0.5) ? 3e38f : -3e38f) * (rng.bernoulli(0.5) ? 1 : 0.5f);
    }
  }
}

// Which scores the fused CUDA path may write in place of the logit's bits (indexer.h): +0.0 for
// -0.0 and 0x7fffffff for a NaN. Off for every other path: their scores are the bits.
enum class ScoreBits { kExact, kFusedKeys };

// scores[t, i] against the logits op's output: the bits of logits[t, column_of(t, out[t, i])]
// where out[t, i] >= 0, -inf where it is -1; columns [k, row stride) still poisoned.
inline ::testing::AssertionResult ScoresAreTheLogitsBits(
    const HostTensor& scores, const HostTensor& out, const HostTensor& logits, int k,
    const std::function<int64_t(int64_t row)>& row_start, ScoreBits rule = ScoreBits::kExact) {
  const uint32_t minus_inf = float_bits(-kInf);
  for (int64_t t = 0; t < out.size(0); ++t) {
    for (int i = 0; i < k; ++i) {
      const int32_t index = out.at<int32_t>({t, i});
      const uint32_t got = float_bits(scores.at<float>({t, i}));
      uint32_t want = minus_inf;
      if (index >= 0) want = float_bits(logits.at<float>({t, row_start(t) + index}));
      bool same = got == want;
      if (!same && rule == ScoreBits::kFusedKeys && index >= 0) {
        const bool nan = (want & 0x7fffffffu) > 0x7f800000u;
        same = (nan && got == 0x7fffffffu) || (want == 0x80000000u && got == 0u);
      }
      if (!same) {
        char text[64];
        std::snprintf(text, sizeof text, "score bits 0x%08x, expected 0x%08x", got, want);
        return ::testing::AssertionFailure()
               << "row " << t << " slot " << i << " (index " << index << "): " << text;
      }
    }
    for (int64_t c = k; c < scores.stride(0); ++c) {
      const uint32_t bits = scores.data<uint32_t>()[t * scores.stride(0) + c];
      if (bits != kPoisonLogitBits) {
        return ::testing::AssertionFailure()
               << "row " << t << " column " << c << " (>= k=" << k << ") of scores was written";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Two i32 [rows, >= C] block outputs: the same first C columns, the rest of `got` poisoned.
inline ::testing::AssertionResult SameBlocks(const HostTensor& got, const HostTensor& expected,
                                             int64_t num_blocks) {
  for (int64_t t = 0; t < expected.size(0); ++t) {
    for (int64_t i = 0; i < num_blocks; ++i) {
      if (got.at<int32_t>({t, i}) != expected.at<int32_t>({t, i})) {
        return ::testing::AssertionFailure()
               << "row " << t << " block slot " << i << " is " << got.at<int32_t>({t, i})
               << ", expected " << expected.at<int32_t>({t, i});
      }
    }
    for (int64_t c = num_blocks; c < got.stride(0); ++c) {
      if (got.data<int32_t>()[t * got.stride(0) + c] != kPoisonIndex) {
        return ::testing::AssertionFailure()
               << "row " << t << " column " << c << " (>= C=" << num_blocks << ") was written";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Decode rows' visible ends as an i32 [rows] tensor (CandidateRows::decode with row_repeat 1).
inline HostTensor decode_row_ends(const std::vector<int64_t>& ends) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(ends.size())});
  for (size_t r = 0; r < ends.size(); ++r) t.data<int32_t>()[r] = static_cast<int32_t>(ends[r]);
  return t;
}

}  // namespace fitest
