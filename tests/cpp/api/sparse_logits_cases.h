// SPDX-License-Identifier: Apache-2.0
// Cases of the sparse logits ops (candidates.h) shared by the CPU and CUDA tests: candidate rows,
// their sparse indices, and the expected sparse logits read off the dense logits of the same
// keys (the ops' contract: each valid column has the dense logit's bits).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support/compare.h"
#include "support/kcache.h"
#include "support/operands.h"

namespace fitest {

// Distinct candidate blocks inside each row (a source's output: no repeats), a few -1.
inline HostTensor distinct_candidates(Rng& rng, int64_t rows, int num_blocks,
                                      const std::vector<int64_t>& row_blocks) {
  HostTensor cand(DType::kI32, {rows, num_blocks});
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> pool(static_cast<size_t>(row_blocks[r]));
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
    rng.shuffle(pool);
    for (int i = 0; i < num_blocks; ++i) {
      cand.at<int32_t>({r, i}) =
          i < static_cast<int>(pool.size()) && !rng.bernoulli(0.05) ? pool[i] : -1;
    }
  }
  return cand;
}

// The sparse indices and valid ends of a decode problem's rows (each sees [0, its end)), from
// distinct candidate blocks of `block_size` positions, one sparse block each.
struct DecodeSparseColumns {
  HostTensor indices;  // [rows, num_blocks] i32
  HostTensor end;      // [rows] i32
  Status status;       // candidate_blocks_to_sparse_indices's
};

inline DecodeSparseColumns decode_sparse_columns(Rng& rng, const DecodeProblem& p, int block_size,
                                                 int num_blocks) {
  const int64_t rows = p.rows();
  HostTensor ends(DType::kI32, {rows});
  std::vector<int64_t> row_blocks(rows);
  for (int64_t r = 0; r < rows; ++r) {
    ends.data<int32_t>()[r] = static_cast<int32_t>(p.ends[r]);
    row_blocks[r] = (p.ends[r] + block_size - 1) / block_size;
  }
  const HostTensor cand = distinct_candidates(rng, rows, num_blocks, row_blocks);
  DecodeSparseColumns columns{HostTensor(DType::kI32, {rows, num_blocks}),
                              HostTensor(DType::kI32, {rows}), Status::Ok()};
  columns.status = candidate_blocks_to_sparse_indices(
      columns.indices.view(), columns.end.view(), cand.view(), CandidateRows::decode(ends.view()),
      block_size, block_size);
  return columns;
}

// Row t's expected sparse logits from `dense` ([rows, width]): column c < end[t] holds
// dense[t, k], k = indices[t, c / SBK] * SBK + first[t] + c % SBK (first: ks % SBK for the packed
// form, 0 for the paged one; no vector: 0), columns [end[t], S * SBK) -inf when clean, else the
// poison, as are the columns past S * SBK.
inline ::testing::AssertionResult SparseLogitsMatch(const HostTensor& got, const HostTensor& dense,
                                                    const HostTensor& indices,
                                                    const HostTensor& end, int sparse_block,
                                                    bool clean,
                                                    const std::vector<int64_t>& first = {}) {
  const int64_t columns = indices.size(1) * sparse_block;
  for (int64_t t = 0; t < got.size(0); ++t) {
    const int64_t valid = end.data<int32_t>()[t];
    const int64_t offset = first.empty() ? 0 : first[t];
    for (int64_t c = 0; c < got.size(1); ++c) {
      uint32_t bits;
      std::memcpy(&bits, &got.at<float>({t, c}), 4);
      uint32_t want;
      if (c < valid) {
        const int64_t key = int64_t{indices.at<int32_t>({t, c / sparse_block})} * sparse_block +
                            offset + c % sparse_block;
        std::memcpy(&want, &dense.at<float>({t, key}), 4);
      } else if (c < columns && clean) {
        const float minus_inf = -INFINITY;
        std::memcpy(&want, &minus_inf, 4);
      } else {
        want = kPoisonLogitBits;
      }
      if (bits != want) {
        return ::testing::AssertionFailure()
               << "row " << t << " column " << c << " (end " << valid << "): bits 0x" << std::hex
               << bits << ", expected 0x" << want;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// ks[t] % SBK of every row: where a packed row's sparse blocks start in their SBK-aligned runs.
inline std::vector<int64_t> packed_firsts(const HostTensor& ks, int sparse_block) {
  std::vector<int64_t> first(static_cast<size_t>(ks.size(0)));
  for (size_t t = 0; t < first.size(); ++t) first[t] = ks.data<int32_t>()[t] % sparse_block;
  return first;
}

}  // namespace fitest
