// SPDX-License-Identifier: Apache-2.0
// Reference candidate ops: spec §8.2-§8.5 as plain loops, one row at a time.
#include "reference/candidates.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/access.h"
#include "reference/reference.h"

namespace flashindexer::reference {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float logit_at(const TensorView& logits, int64_t t, int64_t col) {
  return *element<float>(logits, t, col);
}

// Visible columns [ks, min(ke, width)) of a row, or an empty range.
struct Visible {
  int64_t start;
  int64_t end;
  int64_t count() const { return end > start ? end - start : 0; }
};

Visible visible_columns(const CandidateBounds& b, int64_t width) {
  return {b.ks, std::min(b.ke, width)};
}

}  // namespace

CandidateBounds candidate_bounds(const CandidateRows& rows, int64_t t) {
  const int64_t bound_row = t / rows.row_repeat;
  const int64_t ks = rows.ks.defined() ? *element<int32_t>(rows.ks, bound_row) : 0;
  int64_t ke;
  if (rows.ke.rank == 2) {
    ke = *element<int32_t>(rows.ke, bound_row / rows.ke.shape[1], bound_row % rows.ke.shape[1]);
  } else {
    ke = *element<int32_t>(rows.ke, bound_row);
  }
  return {ks, ke};
}

bool block_ranks_before(float score_a, int64_t id_a, float score_b, int64_t id_b) {
  const float a = std::isnan(score_a) ? kInf : score_a;
  const float b = std::isnan(score_b) ? kInf : score_b;
  if (a != b) return a > b;
  return id_a < id_b;
}

void select_candidate_blocks(const TensorView& out, const TensorView& logits,
                             const CandidateRows& rows, int num_blocks, int block_size) {
  const int64_t width = logits.shape[1];
  const int64_t nblocks = (width + block_size - 1) / block_size;
  for (int64_t t = 0; t < out.shape[0]; ++t) {
    const Visible vis = visible_columns(candidate_bounds(rows, t), width);
    // §8.2 step 1: x padded with -inf; B[b] = max over the block, NaN propagating.
    std::vector<float> score(static_cast<size_t>(nblocks), -kInf);
    for (int64_t b = 0; b < nblocks; ++b) {
      for (int64_t o = 0; o < block_size; ++o) {
        const int64_t col = vis.start + b * block_size + o;
        if (col >= vis.end) break;
        const float x = logit_at(logits, t, col);
        if (std::isnan(x) || std::isnan(score[b])) {
          score[b] = std::numeric_limits<float>::quiet_NaN();
        } else {
          score[b] = std::max(score[b], x);
        }
      }
    }
    // Step 2: the newest visible block is pinned.
    if (vis.count() > 0) score[(vis.count() - 1) / block_size] = kInf;
    // Step 3: the best min(C, nblocks) blocks; -inf ones are not kept.
    std::vector<int64_t> ids(static_cast<size_t>(nblocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::sort(ids.begin(), ids.end(),
              [&](int64_t a, int64_t b) { return block_ranks_before(score[a], a, score[b], b); });
    const int64_t selected = std::min<int64_t>(num_blocks, nblocks);
    for (int64_t i = 0; i < num_blocks; ++i) {
      const bool kept = i < selected && score[ids[i]] != -kInf;
      *element<int32_t>(out, t, i) = kept ? static_cast<int32_t>(ids[i]) : -1;
    }
  }
}

void apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                          const TensorView& candidates, int block_size) {
  const int64_t width = logits.shape[1];
  for (int64_t t = 0; t < logits.shape[0]; ++t) {
    const CandidateBounds b = candidate_bounds(rows, t);
    std::vector<int64_t> flagged;
    bool edge = false;
    for (int64_t i = 0; i < candidates.shape[1]; ++i) {
      const int64_t c = *element<int32_t>(candidates, t, i);
      if (c < 0) continue;
      if (b.ks + c * block_size >= width) {
        edge = true;
      } else {
        flagged.push_back(c);
      }
    }
    for (int64_t col = 0; col < width; ++col) {
      bool keep = false;
      if (b.ks <= col && col < b.ke) {
        const int64_t block = (col - b.ks) / block_size;
        keep = std::find(flagged.begin(), flagged.end(), block) != flagged.end() ||
               (col == width - 1 && edge);
      }
      if (!keep) *element<float>(logits, t, col) = -kInf;
    }
  }
}

void candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                            const CandidateRows& rows, const TensorView& candidates, int block_size,
                            int k, bool vllm_compatible) {
  const int64_t width = logits.shape[1];
  if (vllm_compatible) reference::apply_candidate_mask(logits, rows, candidates, block_size);
  for (int64_t t = 0; t < out.shape[0]; ++t) {
    const Visible vis = visible_columns(candidate_bounds(rows, t), width);
    // The blocks the row's candidates name, then the positions it may select, each once.
    const int64_t row_blocks = (vis.count() + block_size - 1) / block_size;
    std::vector<bool> named(static_cast<size_t>(row_blocks), false);
    for (int64_t i = 0; i < candidates.shape[1]; ++i) {
      const int64_t c = *element<int32_t>(candidates, t, i);
      if (c >= 0 && c < row_blocks) named[c] = true;
    }
    std::vector<int64_t> positions;
    for (int64_t p = 0; p < vis.count(); ++p) {
      if (vllm_compatible || named[p / block_size]) positions.push_back(p);
    }
    std::sort(positions.begin(), positions.end(), [&](int64_t a, int64_t b) {
      return ranks_before(logit_at(logits, t, vis.start + a), a, logit_at(logits, t, vis.start + b),
                          b);
    });
    for (int64_t i = 0; i < k; ++i) {
      *element<int32_t>(out, t, i) =
          i < static_cast<int64_t>(positions.size()) ? static_cast<int32_t>(positions[i]) : -1;
    }
  }
}

void candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                        const TensorView& candidates, const CandidateRows& rows,
                                        int block_size, int sparse_block) {
  const int64_t ratio = block_size / sparse_block;
  for (int64_t t = 0; t < candidates.shape[0]; ++t) {
    const CandidateBounds b = candidate_bounds(rows, t);
    const int64_t row_keys = std::max<int64_t>(b.ke - b.ks, 0);
    const int64_t row_sparse_blocks = (row_keys + sparse_block - 1) / sparse_block;
    std::vector<int64_t> kept;
    for (int64_t i = 0; i < candidates.shape[1]; ++i) {
      const int64_t c = *element<int32_t>(candidates, t, i);
      for (int64_t part = 0; part < ratio; ++part) {
        const int64_t block = c * ratio + part;
        if (block >= 0 && block < row_sparse_blocks) kept.push_back(block);
      }
    }
    std::sort(kept.begin(), kept.end());
    const int64_t base = b.ks / sparse_block;
    const int64_t slots = sparse_indices.shape[1];
    for (int64_t i = 0; i < slots; ++i) {
      const int64_t block =
          i < static_cast<int64_t>(kept.size()) ? kept[i] : (kept.empty() ? 0 : kept.back());
      *element<int32_t>(sparse_indices, t, i) = static_cast<int32_t>(block + base);
    }
    int64_t valid_columns = 0;
    if (!kept.empty()) {
      const int64_t last_columns = b.ke - (kept.back() * sparse_block + b.ks);
      valid_columns = (static_cast<int64_t>(kept.size()) - 1) * sparse_block +
                      std::clamp<int64_t>(last_columns, 1, sparse_block);
    }
    *element<int32_t>(end, t) = static_cast<int32_t>(valid_columns);
  }
}

void sparse_topk_remap(const TensorView& out, const TensorView& columns,
                       const TensorView& sparse_indices, const CandidateRows& rows,
                       int sparse_block) {
  const int64_t width = sparse_indices.shape[1] * sparse_block;
  for (int64_t t = 0; t < columns.shape[0]; ++t) {
    const int64_t ks = rows.ks.defined() ? *element<int32_t>(rows.ks, t / rows.row_repeat) : 0;
    const int64_t base = ks / sparse_block;
    for (int64_t i = 0; i < columns.shape[1]; ++i) {
      const int64_t c = *element<int32_t>(columns, t, i);
      int32_t position = -1;
      if (c >= 0 && c < width) {
        const int64_t block = *element<int32_t>(sparse_indices, t, c / sparse_block);
        position = static_cast<int32_t>((block - base) * sparse_block + c % sparse_block);
      }
      *element<int32_t>(out, t, i) = position;
    }
  }
}

}  // namespace flashindexer::reference
