// SPDX-License-Identifier: Apache-2.0
// What the GPU topk_per_row tests share: the cases (value distributions, row forms, lengths),
// their inputs drawn from a printed seed, the reference answer, and a run that poisons the
// output, runs twice and compares the bits with the reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/topk/params.h"
#include "flashindexer/flashindexer.h"
#include "flashindexer/formats.h"
#include "reference/reference.h"
#include "support/cuda.h"

namespace topk_cases {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

inline constexpr int32_t kPoison = 0x7fffffff;

using fitest::DeviceBuffer;

enum class Dist {
  kNormal,
  kOffset100,
  kAllEqual,
  kCoarseTies,
  kSpecials,
  kAscending,
  kNarrow,
  kSampleTrap,
  kFineTies,
  kGapAboveK
};
enum class Form { kPrefill, kDecode, kDecodeNextN, kDecode2D };
// kFewLong: every 32nd row sees all keys, the others at most k + 1.
enum class Lengths { kMixed, kFull, kShort, kFewLong };

struct Case {
  int64_t rows;
  int64_t width;
  int k;
  Dist dist = Dist::kNormal;
  bool bf16 = false;
  bool sorted = false;
  Form form = Form::kPrefill;
  Lengths lengths = Lengths::kMixed;
  int64_t row_pad = 0;  // logits row stride = width + row_pad
  int64_t out_pad = 0;  // output row stride = k + out_pad
  int next_n = 2;
};

inline std::string describe(const Case& c) {
  return "rows=" + std::to_string(c.rows) + " width=" + std::to_string(c.width) +
         " k=" + std::to_string(c.k) + " dist=" + std::to_string(static_cast<int>(c.dist)) +
         (c.bf16 ? " bf16" : " f32") + (c.sorted ? " sorted" : "") +
         " form=" + std::to_string(static_cast<int>(c.form)) +
         " row_pad=" + std::to_string(c.row_pad) + " out_pad=" + std::to_string(c.out_pad);
}

// Host-side inputs of one case.
struct Inputs {
  int64_t stride = 0;
  std::vector<float> scores;     // [rows, stride] (the fp32 values; bf16 cases hold bf16 values)
  std::vector<uint16_t> bf16;    // [rows, stride] when bf16
  std::vector<int32_t> ks, ke;   // prefill form
  std::vector<int32_t> lengths;  // decode forms
};

inline float draw(Dist dist, std::mt19937_64& engine, int64_t row, int64_t column, float row_base) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (dist) {
    case Dist::kNormal:
      return normal(engine);
    case Dist::kOffset100:
      return 100.0f + normal(engine);
    case Dist::kAllEqual:
      return row_base;
    case Dist::kCoarseTies:
      return std::round(normal(engine) * 2.0f) / 2.0f;  // ~15 distinct values: huge tie classes
    case Dist::kSpecials: {
      const uint32_t pick = static_cast<uint32_t>(engine() % 100);
      if (row % 7 == 3) return std::numeric_limits<float>::quiet_NaN();  // an all-NaN row
      if (pick < 6) return std::numeric_limits<float>::quiet_NaN();
      if (pick < 8) return -std::numeric_limits<float>::quiet_NaN();
      if (pick < 10) return std::numeric_limits<float>::infinity();
      if (pick < 14) return -std::numeric_limits<float>::infinity();
      if (pick < 17) return 0.0f;
      if (pick < 20) return -0.0f;
      if (row % 7 == 5) return -std::numeric_limits<float>::infinity();  // fewer than k finite
      return normal(engine);
    }
    case Dist::kAscending:
      return static_cast<float>(column) * 0.5f + row_base;
    case Dist::kNarrow:  // 12 adjacent floats: every histogram round must fall back on indices
      return 1.0f + static_cast<float>(engine() % 12) * 0x1p-23f;
    case Dist::kSampleTrap:  // high exactly where the sampled threshold of a 128K row reads
      return (column % 128 < 4 ? 10.0f : 0.0f) + normal(engine);
    case Dist::kFineTies:  // ~130 distinct values: hundreds of copies of the k-th score
      return std::round(normal(engine) * 16.0f) / 16.0f;
    case Dist::kGapAboveK:  // N(0, 1); make_inputs lifts k random keys of the row by 10
      return normal(engine);
  }
  return 0.0f;
}

inline Inputs make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 engine(seed);
  Inputs in;
  in.stride = c.width + c.row_pad;
  in.scores.assign(static_cast<size_t>(c.rows * in.stride), -12345.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const float row_base = static_cast<float>(static_cast<int>(engine() % 64)) - 32.0f;
    for (int64_t s = 0; s < c.width; ++s) {
      float x = draw(c.dist, engine, r, s, row_base);
      if (c.bf16) x = bf16_to_float(float_to_bf16(x));
      in.scores[r * in.stride + s] = x;
    }
    if (c.dist == Dist::kGapAboveK) {
      // Exactly k keys far above the others: the k-th largest is the lowest of them.
      std::vector<int64_t> columns(static_cast<size_t>(c.width));
      for (int64_t s = 0; s < c.width; ++s) columns[s] = s;
      std::shuffle(columns.begin(), columns.end(), engine);
      for (int64_t j = 0; j < std::min<int64_t>(c.k, c.width); ++j) {
        float& x = in.scores[r * in.stride + columns[j]];
        x = c.bf16 ? bf16_to_float(float_to_bf16(x + 10.0f)) : x + 10.0f;
      }
    }
  }
  if (c.bf16) {
    in.bf16.resize(in.scores.size());
    for (size_t i = 0; i < in.scores.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &in.scores[i], sizeof bits);
      in.bf16[i] = static_cast<uint16_t>(bits >> 16);  // exact: values are bf16 already
    }
  }
  int64_t drawn = 0;
  auto draw_length = [&](int64_t max_length) -> int64_t {
    if (c.lengths == Lengths::kFull) return max_length;
    if (c.lengths == Lengths::kFewLong) {
      return drawn++ % 32 == 0 ? max_length : static_cast<int64_t>(engine() % (c.k + 2));
    }
    if (c.lengths == Lengths::kShort) return static_cast<int64_t>(engine() % (c.k + 2));
    const uint32_t pick = static_cast<uint32_t>(engine() % 20);
    if (pick == 0) return 0;
    if (pick == 1) return std::min<int64_t>(max_length, static_cast<int64_t>(engine() % (c.k + 1)));
    if (pick < 6) return static_cast<int64_t>(engine() % (max_length + 1));
    return std::max<int64_t>(0, max_length - static_cast<int64_t>(engine() % 8));
  };
  if (c.form == Form::kPrefill) {
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t start =
          c.lengths == Lengths::kFull
              ? 0
              : static_cast<int64_t>(engine() % std::min<int64_t>(41, c.width + 1));
      const int64_t length = draw_length(c.width - start);
      in.ks.push_back(static_cast<int32_t>(start));
      in.ke.push_back(static_cast<int32_t>(start + length));
    }
  } else {
    const int64_t requests = c.form == Form::kDecode ? c.rows : c.rows / c.next_n;
    for (int64_t b = 0; b < requests; ++b) {
      if (c.form == Form::kDecode2D) {
        for (int j = 0; j < c.next_n; ++j)
          in.lengths.push_back(static_cast<int32_t>(draw_length(c.width)));
      } else {
        in.lengths.push_back(static_cast<int32_t>(draw_length(c.width)));
      }
    }
  }
  return in;
}

// The ranges over host or device copies of the range arrays.
inline RowRanges make_ranges(const Case& c, const Inputs& in, const void* ks, const void* ke,
                             const void* lengths, Device device) {
  if (c.form == Form::kPrefill) {
    return RowRanges::prefill(
        TensorView::contiguous(const_cast<void*>(ks), DType::kI32, {c.rows}, device),
        TensorView::contiguous(const_cast<void*>(ke), DType::kI32, {c.rows}, device));
  }
  const int64_t count = static_cast<int64_t>(in.lengths.size());
  if (c.form == Form::kDecode) {
    return RowRanges::decode(
        TensorView::contiguous(const_cast<void*>(lengths), DType::kI32, {count}, device), 1);
  }
  if (c.form == Form::kDecodeNextN) {
    return RowRanges::decode(
        TensorView::contiguous(const_cast<void*>(lengths), DType::kI32, {count}, device), c.next_n);
  }
  return RowRanges::decode(TensorView::contiguous(const_cast<void*>(lengths), DType::kI32,
                                                  {count / c.next_n, c.next_n}, device),
                           c.next_n);
}

// Reference answer [rows, k] sorted best first, -1 padded.
inline std::vector<int32_t> reference_answer(const Case& c, const Inputs& in) {
  std::vector<int32_t> expected(static_cast<size_t>(c.rows * c.k));
  const TensorView logits = c.bf16 ? TensorView::contiguous(const_cast<uint16_t*>(in.bf16.data()),
                                                            DType::kBF16, {c.rows, c.width})
                                         .with_row_stride(in.stride)
                                   : TensorView::contiguous(const_cast<float*>(in.scores.data()),
                                                            DType::kF32, {c.rows, c.width})
                                         .with_row_stride(in.stride);
  const RowRanges ranges =
      make_ranges(c, in, in.ks.data(), in.ke.data(), in.lengths.data(), Device::kCPU);
  reference::topk_per_row(TensorView::contiguous(expected.data(), DType::kI32, {c.rows, c.k}),
                          logits, ranges, c.k);
  return expected;
}

// Compares one GPU output [rows, out_stride] with the reference [rows, k].
inline void expect_matches(const Case& c, const std::vector<int32_t>& got, int64_t out_stride,
                           const std::vector<int32_t>& expected, uint64_t seed) {
  int reported = 0;
  for (int64_t r = 0; r < c.rows && reported < 5; ++r) {
    const int32_t* g = got.data() + r * out_stride;
    const int32_t* e = expected.data() + r * c.k;
    std::vector<int32_t> a(g, g + c.k);
    std::vector<int32_t> b(e, e + c.k);
    if (!c.sorted) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
    }
    bool untouched = true;
    for (int64_t j = c.k; j < out_stride; ++j) untouched &= g[j] == kPoison;
    // An unsorted answer lists its indices in ascending order (the valid prefix).
    bool ascending = true;
    for (int64_t j = 1; !c.sorted && j < c.k && g[j] >= 0; ++j) ascending &= g[j - 1] < g[j];
    if (!ascending) {
      ADD_FAILURE() << describe(c) << " seed=" << seed << ": row " << r
                    << " is unsorted but not in ascending index order";
      ++reported;
    }
    if (a != b || !untouched) {
      int64_t first = 0;
      while (first < c.k && a[first] == b[first]) ++first;
      ADD_FAILURE() << describe(c) << " seed=" << seed << ": row " << r << " differs"
                    << (untouched ? "" : " (columns >= k were written)") << "; first mismatch at "
                    << first << ": got " << (first < c.k ? a[first] : 0) << ", expected "
                    << (first < c.k ? b[first] : 0);
      ++reported;
    }
  }
}

// Runs one case end to end: upload, run twice (bit-identical), compare with the reference.
inline void run_case(const Case& c) {
  const uint64_t seed = fitest::test_seed();
  SCOPED_TRACE(describe(c) + " seed=" + std::to_string(seed));
  const Inputs in = make_inputs(c, seed);
  const size_t element = c.bf16 ? 2 : 4;
  DeviceBuffer logits_buffer(static_cast<size_t>(c.rows * in.stride) * element);
  DeviceBuffer ks_buffer(in.ks.size() * 4), ke_buffer(in.ke.size() * 4);
  DeviceBuffer lengths_buffer(in.lengths.size() * 4);
  const int64_t out_stride = c.k + c.out_pad;
  DeviceBuffer out_buffer(static_cast<size_t>(c.rows * out_stride) * 4);
  const size_t workspace_bytes = topk_per_row_cuda_workspace_size(c.rows, c.width, c.k);
  DeviceBuffer workspace(workspace_bytes);
  ASSERT_EQ(logits_buffer.error(), cudaSuccess);
  ASSERT_EQ(out_buffer.error(), cudaSuccess);
  ASSERT_EQ(workspace.error(), cudaSuccess);
  const void* host_logits = c.bf16 ? static_cast<const void*>(in.bf16.data())
                                   : static_cast<const void*>(in.scores.data());
  ASSERT_EQ(
      cudaMemcpy(logits_buffer.get(), host_logits, logits_buffer.bytes(), cudaMemcpyHostToDevice),
      cudaSuccess);
  if (!in.ks.empty()) {
    ASSERT_EQ(cudaMemcpy(ks_buffer.get(), in.ks.data(), ks_buffer.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ke_buffer.get(), in.ke.data(), ke_buffer.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  if (!in.lengths.empty()) {
    ASSERT_EQ(cudaMemcpy(lengths_buffer.get(), in.lengths.data(), lengths_buffer.bytes(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  const TensorView logits =
      TensorView::contiguous(logits_buffer.get(), c.bf16 ? DType::kBF16 : DType::kF32,
                             {c.rows, c.width}, Device::kCUDA)
          .with_row_stride(in.stride);
  const TensorView out =
      TensorView::contiguous(out_buffer.get(), DType::kI32, {c.rows, c.k}, Device::kCUDA)
          .with_row_stride(out_stride);
  const RowRanges ranges =
      make_ranges(c, in, ks_buffer.get(), ke_buffer.get(), lengths_buffer.get(), Device::kCUDA);
  RunOptions options;
  options.workspace = workspace.get();
  options.workspace_bytes = workspace_bytes;
  TopKOptions topk_options;
  topk_options.sorted = c.sorted;

  const std::vector<int32_t> expected = reference_answer(c, in);
  std::vector<int32_t> first;
  for (int run = 0; run < 2; ++run) {
    std::vector<int32_t> poison(static_cast<size_t>(c.rows * out_stride), kPoison);
    ASSERT_EQ(
        cudaMemcpy(out_buffer.get(), poison.data(), out_buffer.bytes(), cudaMemcpyHostToDevice),
        cudaSuccess);
    const Status status = topk_per_row(out, logits, ranges, c.k, topk_options, options);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got(poison.size());
    ASSERT_EQ(cudaMemcpy(got.data(), out_buffer.get(), out_buffer.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (run == 0) {
      expect_matches(c, got, out_stride, expected, seed);
      first = got;
    } else {
      EXPECT_TRUE(got == first) << describe(c) << " seed=" << seed
                                << ": a second run gave different bits";
    }
  }
}

}  // namespace topk_cases
