// SPDX-License-Identifier: Apache-2.0
// Quantized operands, operand kinds, logit rows and prefill problems.
//
// The builders quantize with the reference (src/reference) so that a test of one public op
// does not depend on the correctness of another; the quantizer tests prove the public
// quantizers equal the reference.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "reference/reference.h"
#include "support/tensors.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Quantized operands (built with the reference quantizers)

// values + scales of one quantized operand; scales undefined for FP8 queries.
struct Operand {
  HostTensor values;
  HostTensor scales;
  QuantizedTensor view() const { return {values.view(), scales.view()}; }
};

inline int64_t value_bytes_per_row(KFormat format, int head_dim) {
  return format == KFormat::kFP8 ? head_dim : head_dim / 2;
}
inline int64_t scale_bytes_per_row(KFormat format, int head_dim) {
  return format == KFormat::kFP8 ? 4 : head_dim / kMxfp4BlockSize;
}

inline std::vector<int64_t> with_last(std::vector<int64_t> lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

// Quantizes rows of `x` (rows x head_dim) with the reference quantizers.
//   FP8:   values [lead..., D] e4m3 and, when `with_scales`, scales [lead...] f32.
//   MXFP4: values [lead..., D/2] e2m1x2 and scales [lead..., D/32] ue8m0.
inline Operand quantize_rows(KFormat format, const std::vector<float>& x,
                             const std::vector<int64_t>& lead, int head_dim, bool with_scales) {
  int64_t rows = 1;
  for (int64_t extent : lead) rows *= extent;
  Operand op;
  if (format == KFormat::kFP8) {
    op.values = HostTensor(DType::kE4M3, with_last(lead, head_dim));
    std::vector<float> scales(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      reference::quantize_fp8_row(op.values.bytes() + r * head_dim, &scales[r],
                                  x.data() + r * head_dim, head_dim);
    }
    if (with_scales) {
      op.scales = HostTensor(DType::kF32, lead);
      std::copy(scales.begin(), scales.end(), op.scales.data<float>());
    }
  } else {
    op.values = HostTensor(DType::kE2M1x2, with_last(lead, head_dim / 2));
    op.scales = HostTensor(DType::kUE8M0, with_last(lead, head_dim / kMxfp4BlockSize));
    for (int64_t r = 0; r < rows; ++r) {
      reference::quantize_mxfp4_row(op.values.bytes() + r * head_dim / 2,
                                    op.scales.bytes() + r * head_dim / kMxfp4BlockSize,
                                    x.data() + r * head_dim, head_dim);
    }
  }
  return op;
}

// Keys [n, D] (+ scales) of random rows.
inline Operand make_keys(Rng& rng, KFormat format, int64_t n, int head_dim) {
  return quantize_rows(format, random_rows(rng, n, head_dim), {n}, head_dim, true);
}

// Query heads [lead..., H, D]; FP8 queries carry no scales (folded into the weights).
inline Operand make_query(Rng& rng, KFormat format, std::vector<int64_t> lead_with_heads,
                          int head_dim) {
  int64_t rows = 1;
  for (int64_t extent : lead_with_heads) rows *= extent;
  return quantize_rows(format, random_rows(rng, rows, head_dim), lead_with_heads, head_dim,
                       format == KFormat::kMXFP4);
}

// Weights [rows, H] f32, uniform in [-1, 1] (negative weights are part of the contract).
inline HostTensor make_weights(Rng& rng, int64_t rows, int heads) {
  HostTensor w(DType::kF32, {rows, heads});
  for (int64_t i = 0; i < rows * heads; ++i)
    w.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
  return w;
}

// Copies row `from` of an operand of keys [n, ...] over row `to` (duplicate keys => ties).
inline void copy_key_row(Operand& keys, KFormat format, int head_dim, int64_t from, int64_t to) {
  const int64_t vb = value_bytes_per_row(format, head_dim);
  std::memcpy(keys.values.bytes() + to * vb, keys.values.bytes() + from * vb, vb);
  const int64_t sb = scale_bytes_per_row(format, head_dim);
  std::memcpy(keys.scales.bytes() + to * sb, keys.scales.bytes() + from * sb, sb);
}

// ---------------------------------------------------------------------------------------------
// Operand kinds and logit rows shared by the test files

// One kind of scoring operand: its format, head count and head dimension.
struct OperandCase {
  KFormat format;
  int heads;
  int head_dim;
};
// Both formats, both head counts, both head dimensions, in four combinations.
inline constexpr OperandCase kOperandCases[] = {{KFormat::kFP8, 32, 128},
                                                {KFormat::kFP8, 64, 64},
                                                {KFormat::kMXFP4, 64, 128},
                                                {KFormat::kMXFP4, 32, 64}};

inline std::string describe(const OperandCase& c) {
  return std::string(kformat_name(c.format)) + " H=" + std::to_string(c.heads) +
         " D=" + std::to_string(c.head_dim);
}

// How a row of logits is filled.
enum class Fill {
  kRandom,   // continuous values: ties only by accident
  kFewTies,  // four distinct values: heavy ties at the k-th value
  kSpecial,  // NaNs of both signs and any payload, +-inf, +-0 mixed with numbers
};

inline float random_nan(Rng& rng) {
  const uint32_t sign = rng.bernoulli(0.5) ? 0x80000000u : 0u;
  return bits_float(sign | 0x7F800000u | (1u + rng.bits32() % 0x7FFFFFu));
}

inline float random_logit(Rng& rng, Fill fill) {
  switch (fill) {
    case Fill::kRandom:
      return rng.normal(10.0f);
    case Fill::kFewTies:
      return static_cast<float>(rng.uniform_int(0, 3)) - 1.0f;
    case Fill::kSpecial: {
      const double u = rng.uniform(0, 1);
      if (u < 0.12) return random_nan(rng);
      if (u < 0.17) return kInf;
      if (u < 0.25) return -kInf;
      if (u < 0.30) return 0.0f;
      if (u < 0.35) return -0.0f;
      return static_cast<float>(rng.uniform_int(-3, 3));
    }
  }
  return 0.0f;
}

// ---------------------------------------------------------------------------------------------
// Prefill problems

struct PrefillProblem {
  KFormat format = KFormat::kFP8;
  int heads = 32;
  int head_dim = 128;
  int64_t rows = 0;
  int64_t num_keys = 0;
  Operand q;           // [M, H, D(/2)]
  Operand keys;        // [N, D(/2)] + scales
  HostTensor weights;  // [M, H] f32
  HostTensor ks;       // [M] i32
  HostTensor ke;       // [M] i32
};

// Random row ranges inside [0, num_keys): the first rows are the edge cases (empty at 0, empty
// at the end, full, length 1, odd start), the rest random.
inline void fill_row_ranges(Rng& rng, HostTensor& ks, HostTensor& ke, int64_t rows,
                            int64_t num_keys) {
  for (int64_t t = 0; t < rows; ++t) {
    int64_t start = rng.uniform_int(0, num_keys);
    int64_t end = rng.uniform_int(start, num_keys);
    switch (t) {
      case 0:
        start = end = 0;
        break;
      case 1:
        start = end = num_keys;
        break;
      case 2:
        start = 0;
        end = num_keys;
        break;
      case 3:
        start = std::min<int64_t>(num_keys, 3);
        end = std::min<int64_t>(num_keys, start + 1);
        break;
      case 4:
        start = std::min<int64_t>(num_keys, 1);
        end = num_keys;
        break;
      default:
        break;
    }
    ks.data<int32_t>()[t] = static_cast<int32_t>(start);
    ke.data<int32_t>()[t] = static_cast<int32_t>(end);
  }
}

inline PrefillProblem make_prefill_problem(Rng& rng, KFormat format, int64_t rows, int64_t num_keys,
                                           int heads, int head_dim) {
  PrefillProblem p;
  p.format = format;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rows = rows;
  p.num_keys = num_keys;
  p.q = make_query(rng, format, {rows, heads}, head_dim);
  p.keys = make_keys(rng, format, num_keys, head_dim);
  p.weights = make_weights(rng, rows, heads);
  p.ks = HostTensor(DType::kI32, {rows});
  p.ke = HostTensor(DType::kI32, {rows});
  fill_row_ranges(rng, p.ks, p.ke, rows, num_keys);
  return p;
}

}  // namespace fitest
