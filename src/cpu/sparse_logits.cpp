// SPDX-License-Identifier: Apache-2.0
// Sparse logits on the CPU (candidates.h): per row, each sparse block's valid keys are loaded as
// one key tile and scored with the core that writes the CPU logits (a score depends on its key
// and query row alone), so each column has the bits mqa_logits / paged_mqa_logits give its key.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "cpu/candidates.h"
#include "cpu/elements.h"
#include "cpu/scoring/score.h"

namespace flashindexer::cpu {
namespace {

struct RowScratch {
  QueryRow row;
  KeyTile tile;
  alignas(64) float scores[kKeyTile];
};

static_assert(kKeyTile >= 16, "a sparse block (8 or 16 keys) fits one key tile");

// Rows [0, rows) on the OpenMP threads: prepare(t, row) loads query row t and returns the keys
// (PackedKeys or PagedKeys) and the offset added to sparse_indices[t, j] * SBK for its first key.
template <typename Prepare>
void sparse_rows(const TensorView& logits, const TensorView& sparse_indices, const TensorView& end,
                 int sparse_block, bool clean, int threads, Prepare&& prepare) {
  const int64_t rows = logits.shape[0];
  const int64_t columns = sparse_indices.shape[1] * sparse_block;
#pragma omp parallel num_threads(threads)
  {
    auto scratch = std::make_unique<RowScratch>();
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < rows; ++t) {
      const auto [keys, offset] = prepare(t, scratch->row);
      const int64_t valid = *element<int32_t>(end, t);
      float* out = element<float>(logits, t, 0);
      for (int64_t column = 0; column < valid; column += sparse_block) {
        const int n = static_cast<int>(std::min<int64_t>(sparse_block, valid - column));
        const int64_t first =
            int64_t{*element<int32_t>(sparse_indices, t, column / sparse_block)} * sparse_block +
            offset;
        load_key_tile(scratch->tile, keys, first, n, scratch->row.head_dim);
        score_tile(scratch->scores, scratch->row, scratch->tile);
        std::copy(scratch->scores, scratch->scores + n, out + column);
      }
      if (clean) std::fill(out + valid, out + columns, -INFINITY);
    }
  }
}

}  // namespace

void sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights,
                       const TensorView& sparse_indices, const TensorView& end,
                       const std::vector<RowBound>& bounds, int sparse_block, bool clean,
                       int threads) {
  sparse_rows(logits, sparse_indices, end, sparse_block, clean, threads,
              [&](int64_t t, QueryRow& row) {
                load_query_row(row, q, t, 0, weights, t);
                return std::pair{PackedKeys(keys), bounds[t].ks % sparse_block};
              });
}

void paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                             const PagedKCache& cache, const TensorView& weights,
                             const TensorView& sparse_indices, const TensorView& end,
                             const TensorView& block_table, int sparse_block, bool clean,
                             int threads) {
  const int64_t next_n = q.values.shape[1];
  sparse_rows(logits, sparse_indices, end, sparse_block, clean, threads,
              [&](int64_t t, QueryRow& row) {
                load_query_row(row, q, t / next_n, t % next_n, weights, t);
                return std::pair{PagedKeys(cache, element<int32_t>(block_table, t / next_n, 0)),
                                 int64_t{0}};
              });
}

}  // namespace flashindexer::cpu
