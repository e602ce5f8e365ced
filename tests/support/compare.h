// SPDX-License-Identifier: Apache-2.0
// Comparison helpers every test file uses: rejections, top-k rows, scoring results against the
// reference, and the prefill / paged runs they compare.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "reference/reference.h"
#include "support/kcache.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Comparisons

inline std::string status_text(const Status& status) {
  return std::string(status_code_name(status.code())) + ": " + status.message();
}

#define FI_ASSERT_OK(expr)                                                                \
  do {                                                                                    \
    const ::flashindexer::Status fi_status_ = (expr);                                     \
    ASSERT_TRUE(fi_status_.ok()) << #expr << " -> " << ::fitest::status_text(fi_status_); \
  } while (0)

#define FI_EXPECT_OK(expr)                                                                \
  do {                                                                                    \
    const ::flashindexer::Status fi_status_ = (expr);                                     \
    EXPECT_TRUE(fi_status_.ok()) << #expr << " -> " << ::fitest::status_text(fi_status_); \
  } while (0)

// A rejected call: the expected code and a message naming every one of `names`.
inline ::testing::AssertionResult IsRejected(const Status& status, StatusCode code,
                                             std::initializer_list<const char*> names) {
  if (status.ok()) return ::testing::AssertionFailure() << "the call succeeded";
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "code " << status_code_name(status.code()) << ", expected " << status_code_name(code)
           << " (message: \"" << status.message() << "\")";
  }
  for (const char* name : names) {
    if (status.message().find(name) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << status.message() << "\" does not name \"" << name << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// A rejected call whose message names at least one of `names` (for conditions that involve
// two arguments, e.g. a visible length beyond the logits width).
inline ::testing::AssertionResult IsRejectedNamingAnyOf(const Status& status,
                                                        std::initializer_list<StatusCode> codes,
                                                        std::initializer_list<const char*> names) {
  if (status.ok()) return ::testing::AssertionFailure() << "the call succeeded";
  if (std::find(codes.begin(), codes.end(), status.code()) == codes.end()) {
    return ::testing::AssertionFailure() << "unexpected code " << status_code_name(status.code())
                                         << " (message: \"" << status.message() << "\")";
  }
  for (const char* name : names) {
    if (status.message().find(name) != std::string::npos) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" names none of the expected arguments";
}

// The derived error bound of one logit against its exact fp64 value (reference::score_tolerance):
// fp32 rounding everywhere; `tensor_cores` adds the FP8 wgmma accumulation of the CUDA kernel.
inline double logit_tolerance(int head_dim, int heads, double magnitude,
                              bool tensor_cores = false) {
  return flashindexer::reference::score_tolerance(magnitude, head_dim, heads, tensor_cores);
}

// Row r of an i32 [rows, >= k] output as a vector of its first k entries.
inline std::vector<int32_t> topk_row(const HostTensor& out, int64_t row, int k) {
  std::vector<int32_t> result(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) result[i] = out.at<int32_t>({row, i});
  return result;
}

// Checks one row of a top-k result against the reference row (sorted best first, -1 tail):
// a valid prefix of the same length, then -1; the same set; the same order when `sorted`, else
// ascending indices (the unsorted order of every backend).
inline ::testing::AssertionResult TopKRowMatches(const std::vector<int32_t>& got,
                                                 const std::vector<int32_t>& expected,
                                                 bool sorted) {
  const size_t k = expected.size();
  size_t valid = 0;
  while (valid < k && expected[valid] >= 0) ++valid;
  for (size_t i = 0; i < k; ++i) {
    if (i < valid && got[i] < 0) {
      return ::testing::AssertionFailure()
             << "slot " << i << " is " << got[i] << " but " << valid << " keys are visible";
    }
    if (i >= valid && got[i] != -1) {
      return ::testing::AssertionFailure()
             << "slot " << i << " is " << got[i] << ", expected the -1 padding (valid prefix "
             << valid << ")";
    }
  }
  std::vector<int32_t> got_set(got.begin(), got.begin() + valid);
  std::vector<int32_t> expected_set(expected.begin(), expected.begin() + valid);
  if (sorted) {
    for (size_t i = 0; i < valid; ++i) {
      if (got[i] != expected[i]) {
        return ::testing::AssertionFailure()
               << "sorted slot " << i << " is " << got[i] << ", expected " << expected[i];
      }
    }
    return ::testing::AssertionSuccess();
  }
  for (size_t i = 1; i < valid; ++i) {
    if (got[i - 1] >= got[i]) {
      return ::testing::AssertionFailure()
             << "unsorted slots " << i - 1 << " and " << i << " are " << got[i - 1] << ", "
             << got[i] << ": not in ascending index order";
    }
  }
  std::sort(got_set.begin(), got_set.end());
  std::sort(expected_set.begin(), expected_set.end());
  if (std::adjacent_find(got_set.begin(), got_set.end()) != got_set.end()) {
    return ::testing::AssertionFailure() << "duplicate index in the valid prefix";
  }
  if (got_set != expected_set) {
    std::vector<int32_t> missing;
    std::set_difference(expected_set.begin(), expected_set.end(), got_set.begin(), got_set.end(),
                        std::back_inserter(missing));
    std::vector<int32_t> extra;
    std::set_difference(got_set.begin(), got_set.end(), expected_set.begin(), expected_set.end(),
                        std::back_inserter(extra));
    auto failure = ::testing::AssertionFailure();
    failure << missing.size() << " expected indices missing (first";
    for (size_t i = 0; i < std::min<size_t>(missing.size(), 5); ++i) failure << " " << missing[i];
    failure << "), " << extra.size() << " unexpected (first";
    for (size_t i = 0; i < std::min<size_t>(extra.size(), 5); ++i) failure << " " << extra[i];
    return failure << ")";
  }
  return ::testing::AssertionSuccess();
}

// Columns [k, row stride) of every row of an i32 output still hold kPoisonIndex.
inline ::testing::AssertionResult ColumnsBeyondKUntouched(const HostTensor& out, int k) {
  const int64_t row_stride = out.stride(0);
  for (int64_t r = 0; r < out.size(0); ++r) {
    for (int64_t c = k; c < row_stride; ++c) {
      const int32_t v = out.data<int32_t>()[r * row_stride + c];
      if (v != kPoisonIndex) {
        return ::testing::AssertionFailure()
               << "row " << r << " column " << c << " (>= k=" << k << ") was written: " << v;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Every row of `got` against `expected` (both [rows, >= k]): the same sets, the same order
// when sorted; columns >= k of `got` untouched.
inline ::testing::AssertionResult SameTopK(const HostTensor& got, const HostTensor& expected, int k,
                                           bool sorted) {
  for (int64_t r = 0; r < got.size(0); ++r) {
    ::testing::AssertionResult row =
        TopKRowMatches(topk_row(got, r, k), topk_row(expected, r, k), sorted);
    if (!row) return ::testing::AssertionFailure() << "row " << r << ": " << row.message();
  }
  return ColumnsBeyondKUntouched(got, k);
}

// Duplicated keys (exact ties) and all-zero keys (scores exactly 0, ties across rows).
inline void add_ties(Rng& rng, Operand& keys, const OperandCase& c, int64_t num_keys) {
  for (int64_t i = 0; i < num_keys / 4; ++i) {
    copy_key_row(keys, c.format, c.head_dim, rng.uniform_int(0, num_keys - 1),
                 rng.uniform_int(0, num_keys - 1));
  }
  const int64_t vb = value_bytes_per_row(c.format, c.head_dim);
  for (int i = 0; i < 5; ++i) {
    std::memset(keys.values.bytes() + rng.uniform_int(0, num_keys - 1) * vb, 0, vb);
  }
}

// A poisoned i32 top-k output [rows, cols] with the given row stride.
inline HostTensor poisoned_topk_output(int64_t rows, int64_t cols, int64_t row_stride = 0) {
  HostTensor out(DType::kI32, {rows, cols}, row_stride);
  out.fill<int32_t>(kPoisonIndex);
  return out;
}

// A poisoned f32 logits buffer [rows, cols] with the given row stride.
inline HostTensor poisoned_logits(int64_t rows, int64_t cols, int64_t row_stride = 0) {
  HostTensor logits(DType::kF32, {rows, cols}, row_stride);
  logits.fill<uint32_t>(kPoisonLogitBits);
  return logits;
}

// ---------------------------------------------------------------------------------------------
// Scoring results against the reference

using ScoreFn = std::function<reference::Score(int64_t row, int64_t column)>;

// Every entry of a logits buffer: visible entries within the derived tolerance of the fp64
// reference score; other columns of the view exactly -inf (clean) or untouched (not clean);
// columns between the view's width and its row stride untouched.
inline ::testing::AssertionResult LogitsMatch(const HostTensor& logits,
                                              const std::vector<int64_t>& starts,
                                              const std::vector<int64_t>& ends,
                                              const ScoreFn& score, int head_dim, int heads,
                                              bool clean, bool tensor_cores = false) {
  const int64_t width = logits.size(1);
  const int64_t row_stride = logits.stride(0);
  for (int64_t t = 0; t < logits.size(0); ++t) {
    for (int64_t s = 0; s < row_stride; ++s) {
      const float got = logits.data<float>()[t * row_stride + s];
      if (s < width && s >= starts[t] && s < ends[t]) {
        const reference::Score expected = score(t, s);
        const double tolerance = logit_tolerance(head_dim, heads, expected.magnitude, tensor_cores);
        if (!(std::fabs(static_cast<double>(got) - expected.value) <= tolerance)) {
          return ::testing::AssertionFailure()
                 << "row " << t << " key " << s << ": got " << got << ", reference "
                 << expected.value << ", |diff| " << std::fabs(got - expected.value)
                 << " > tolerance " << tolerance << " (magnitude " << expected.magnitude << ")";
        }
      } else if (s < width && clean) {
        if (float_bits(got) != float_bits(-kInf)) {
          return ::testing::AssertionFailure()
                 << "row " << t << " column " << s << " outside [" << starts[t] << ", " << ends[t]
                 << ") is " << got << ", expected -inf (clean=true)";
        }
      } else if (float_bits(got) != kPoisonLogitBits) {
        return ::testing::AssertionFailure()
               << "row " << t << " column " << s << " was written (" << got << ") but "
               << (s >= width ? "lies beyond the logits width "
                              : "is outside the visible range with clean=false")
               << (s >= width ? std::to_string(width) : std::string());
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Reference scores are computed once per problem and reused across option sets.
inline ScoreFn cached(ScoreFn score, int64_t rows, int64_t width) {
  auto cache = std::make_shared<std::vector<reference::Score>>(static_cast<size_t>(rows * width),
                                                               reference::Score{NAN, NAN});
  return [=](int64_t t, int64_t s) {
    reference::Score& entry = (*cache)[t * width + s];
    if (std::isnan(entry.value)) entry = score(t, s);
    return entry;
  };
}

// A problem with its reference scores (computed lazily, once).
struct PrefillRun {
  PrefillProblem problem;
  std::vector<int64_t> starts;
  std::vector<int64_t> ends;
  ScoreFn score;
};

inline PrefillRun prefill_run(Rng& rng, const OperandCase& c, int64_t rows, int64_t keys) {
  PrefillRun run{make_prefill_problem(rng, c.format, rows, keys, c.heads, c.head_dim), {}, {}, {}};
  PrefillProblem& p = run.problem;
  for (int64_t t = 0; t < rows; ++t) {
    run.starts.push_back(p.ks.data<int32_t>()[t]);
    run.ends.push_back(p.ke.data<int32_t>()[t]);
  }
  QuantizedTensor q = p.q.view();
  QuantizedTensor k = p.keys.view();
  TensorView w = p.weights.view();
  run.score = cached([=](int64_t t, int64_t s) { return reference::prefill_score(q, k, w, t, s); },
                     rows, keys);
  return run;
}

struct PagedRun {
  DecodeProblem problem;
  std::vector<int64_t> starts;
  ScoreFn score;
};

inline PagedRun paged_run(Rng& rng, const DecodeConfig& config,
                          const std::vector<int32_t>& forced = {}) {
  PagedRun run{make_decode_problem(rng, config, forced), {}, {}};
  DecodeProblem& p = run.problem;
  run.starts.assign(static_cast<size_t>(p.rows()), 0);
  QuantizedTensor q = p.q.view();
  PagedKCache cache = p.cache.cache();
  TensorView w = p.weights.view();
  TensorView table = p.block_table.view();
  run.score = cached(
      [=](int64_t r, int64_t s) { return reference::decode_score(q, cache, w, table, r, s); },
      p.rows(), p.width);
  return run;
}

inline std::string describe(const DecodeConfig& config) {
  return std::string(kformat_name(config.format)) + " H=" + std::to_string(config.heads) +
         " D=" + std::to_string(config.head_dim) + " next_n=" + std::to_string(config.next_n) +
         " page_size=" + std::to_string(config.page_size) +
         " stride_pad=" + std::to_string(config.stride_pad_bytes) +
         (config.two_dim_lens ? " context_lens [B, next_n]" : " context_lens [B]");
}

}  // namespace fitest
