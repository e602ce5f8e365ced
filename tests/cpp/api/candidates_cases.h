// SPDX-License-Identifier: Apache-2.0
// Random and adversarial inputs of the candidate ops (flashindexer/candidates.h), shared by the
// CPU tests and the GPU tests: logits with NaN / +-inf / ties, prefill bounds of several requests
// with unaligned starts, decode bounds with row_repeat, candidate rows with duplicates, -1,
// negative and out-of-range entries.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "reference/candidates.h"
#include "support/compare.h"

namespace fitest {

enum class BoundsForm { kPrefill, kDecode, kDecode2D };

struct CandidateCase {
  int64_t rows = 0;
  int64_t width = 0;
  int block_size = 8;
  int num_blocks = 16;  // C
  int row_repeat = 1;
  BoundsForm form = BoundsForm::kPrefill;
  HostTensor logits;      // [rows, width] f32, padded rows
  HostTensor ks;          // [rows / row_repeat] (prefill only)
  HostTensor ke;          // [rows / row_repeat], or [B, n] (kDecode2D)
  HostTensor candidates;  // [rows, C] i32
  CandidateRows bounds() const {
    return form == BoundsForm::kPrefill ? CandidateRows::prefill(ks.view(), ke.view(), row_repeat)
                                        : CandidateRows::decode(ke.view(), row_repeat);
  }
  std::string describe() const {
    return std::string(form == BoundsForm::kPrefill  ? "prefill"
                       : form == BoundsForm::kDecode ? "decode"
                                                     : "decode [B, n]") +
           " rows=" + std::to_string(rows) + " width=" + std::to_string(width) +
           " cb=" + std::to_string(block_size) + " C=" + std::to_string(num_blocks) +
           " row_repeat=" + std::to_string(row_repeat);
  }
};

inline float candidate_logit(Rng& rng, Fill fill) { return random_logit(rng, fill); }

// Fills the bounds: prefill rows belong to a few requests packed one after another (unaligned
// starts), each row seeing a prefix of its request; decode rows see [0, length). The first bound
// rows are the edge cases: empty, one key, shorter than one block, the whole width, and (prefill)
// an end past the width.
inline void fill_candidate_bounds(Rng& rng, CandidateCase& c) {
  const int64_t bound_rows = c.rows / c.row_repeat;
  if (c.form == BoundsForm::kPrefill) {
    c.ks = HostTensor(DType::kI32, {bound_rows});
    c.ke = HostTensor(DType::kI32, {bound_rows});
    const int64_t requests = rng.uniform_int(1, 4);
    std::vector<int64_t> cuts{0, c.width};
    for (int64_t r = 1; r < requests; ++r) cuts.push_back(rng.uniform_int(0, c.width));
    std::sort(cuts.begin(), cuts.end());
    for (int64_t t = 0; t < bound_rows; ++t) {
      const int64_t r = rng.uniform_int(0, static_cast<int64_t>(cuts.size()) - 2);
      int64_t start = cuts[r];
      int64_t end = rng.uniform_int(start, cuts[r + 1]);
      switch (t) {
        case 0:
          end = start;
          break;
        case 1:
          end = std::min(start + 1, c.width);
          break;
        case 2:
          end = std::min<int64_t>(start + c.block_size - 1, cuts[r + 1]);
          break;
        case 3:
          start = 0;
          end = c.width;
          break;
        case 4:
          start = rng.uniform_int(0, c.width);
          end = c.width + rng.uniform_int(1, 20);
          break;
        default:
          break;
      }
      c.ks.data<int32_t>()[t] = static_cast<int32_t>(start);
      c.ke.data<int32_t>()[t] = static_cast<int32_t>(end);
    }
    return;
  }
  c.ke = c.form == BoundsForm::kDecode2D ? HostTensor(DType::kI32, {bound_rows / 2, 2})
                                         : HostTensor(DType::kI32, {bound_rows});
  for (int64_t t = 0; t < bound_rows; ++t) {
    int64_t end = rng.uniform_int(0, c.width);
    if (t == 0) end = 0;
    if (t == 1) end = std::min<int64_t>(c.width, rng.uniform_int(1, c.block_size));
    if (t == 2) end = c.width;
    c.ke.data<int32_t>()[t] = static_cast<int32_t>(end);
  }
}

// Candidate rows: mostly the blocks a source would publish (the reference's selection on the
// row's own logits), then mangled: duplicates, -1, other negatives, blocks past the row and past
// the width, and rows of random blocks.
inline void fill_candidate_rows(Rng& rng, CandidateCase& c, double mangle) {
  c.candidates = HostTensor(DType::kI32, {c.rows, c.num_blocks});
  reference::select_candidate_blocks(c.candidates.view(), c.logits.view(), c.bounds(), c.num_blocks,
                                     c.block_size);
  const int64_t width_blocks = (c.width + c.block_size - 1) / c.block_size;
  for (int64_t t = 0; t < c.rows; ++t) {
    int32_t* row = c.candidates.data<int32_t>() + t * c.num_blocks;
    const bool random_row = rng.bernoulli(0.2);
    for (int64_t i = 0; i < c.num_blocks; ++i) {
      if (random_row) row[i] = static_cast<int32_t>(rng.uniform_int(-1, width_blocks));
      if (!rng.bernoulli(mangle)) continue;
      switch (rng.uniform_int(0, 5)) {
        case 0:
          row[i] = row[rng.uniform_int(0, c.num_blocks - 1)];
          break;  // duplicate
        case 1:
          row[i] = -1;
          break;
        case 2:
          row[i] = static_cast<int32_t>(rng.uniform_int(-1000, -2));
          break;
        case 3:
          row[i] = static_cast<int32_t>(width_blocks + rng.uniform_int(0, 3));
          break;
        case 4:
          row[i] = 0x7ffffff0;
          break;
        default:
          row[i] = static_cast<int32_t>(rng.uniform_int(0, width_blocks));
          break;
      }
    }
  }
}

// A case of the given form; `fill` picks the logits' values, and some rows get NaN / +-inf runs.
inline CandidateCase make_candidate_case(Rng& rng, BoundsForm form, int64_t rows, int64_t width,
                                         int block_size, int num_blocks, int row_repeat, Fill fill,
                                         double mangle = 0.1) {
  CandidateCase c;
  c.form = form;
  c.row_repeat = row_repeat;
  c.rows = rows / (c.row_repeat * 2) * (c.row_repeat * 2);
  c.rows = std::max<int64_t>(c.rows, c.row_repeat * 2);
  c.width = width;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.logits = HostTensor(DType::kF32, {c.rows, width}, width + rng.uniform_int(0, 9));
  for (int64_t t = 0; t < c.rows; ++t) {
    for (int64_t s = 0; s < width; ++s) c.logits.at<float>({t, s}) = candidate_logit(rng, fill);
    if (width > 0 && rng.bernoulli(0.15)) {  // a run of one special value over a few blocks
      const float special = rng.pick(std::vector<float>{kInf, -kInf, random_nan(rng)});
      const int64_t at = rng.uniform_int(0, width - 1);
      const int64_t n = rng.uniform_int(1, 3 * block_size);
      for (int64_t s = at; s < std::min(width, at + n); ++s) c.logits.at<float>({t, s}) = special;
    }
  }
  fill_candidate_bounds(rng, c);
  fill_candidate_rows(rng, c, mangle);
  return c;
}

// A copy of a host tensor (same shape and strides).
inline HostTensor copy_of(const HostTensor& from) {
  std::vector<int64_t> shape(from.view().shape.begin(),
                             from.view().shape.begin() + from.view().rank);
  HostTensor to(from.view().dtype, shape,
                from.view().rank >= 2 ? from.stride(from.view().rank - 2) : 0);
  std::memcpy(to.bytes(), from.bytes(), from.byte_size());
  return to;
}

// Unsorted top-k outputs are in ascending index order: the reference's best-first row, sorted.
inline std::vector<int32_t> ascending_valid(std::vector<int32_t> row) {
  const auto valid_end = std::find(row.begin(), row.end(), -1);
  std::sort(row.begin(), valid_end);
  return row;
}

}  // namespace fitest
