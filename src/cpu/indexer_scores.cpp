// SPDX-License-Identifier: Apache-2.0
// The CPU indexer's scores output (IndexerOptions::scores): after the selection, each row's
// selected keys are scored again with the scoring core (score.h). A score depends on its key and
// row alone, not on the tile or lane it is scored in, so these are the bits the logits ops write;
// the cost is k keys a row against the whole row the selection scored. The selection keeps rank
// keys, in which -0.0 and +0.0 (and every NaN) are one value, so the bits cannot come from it.
#include <omp.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "cpu/cpu_ops.h"
#include "cpu/scoring/score.h"

namespace flashindexer::cpu {
namespace {

// The keys a row selected, addressed 0..n-1 in answer order: key i is keys.gather(at[i]), so
// load_key_tile can load them as if they were consecutive.
template <typename Keys>
class SelectedKeys {
 public:
  SelectedKeys(const Keys& keys, const int64_t* at) : keys_(keys), at_(at) {}
  bool mxfp4() const { return keys_.mxfp4(); }
  void gather(int64_t first, int count, KeyBytes* out) const {
    for (int i = 0; i < count; ++i) keys_.gather(at_[first + i], 1, out + i);
  }

 private:
  const Keys& keys_;
  const int64_t* at_;
};

struct ScoreScratch {
  QueryRow row;
  KeyTile tile;
  alignas(64) float scores[kKeyTile];
  int64_t at[kKeyTile];  // the keys of one tile
  int slot[kKeyTile];    // their answer slots
};

// Scores row t's selected keys: out_row[i] >= 0 names key key_of(out_row[i]) of `keys`.
template <typename Keys, typename KeyOf>
void score_selected(float* scores_row, const int32_t* out_row, int64_t out_stride, int k,
                    const Keys& keys, KeyOf key_of, ScoreScratch& s) {
  int filled = 0;
  auto flush = [&] {
    const SelectedKeys<Keys> selected(keys, s.at);
    load_key_tile(s.tile, selected, 0, filled, s.row.head_dim);
    score_tile(s.scores, s.row, s.tile);
    for (int j = 0; j < filled; ++j) scores_row[s.slot[j]] = s.scores[j];
    filled = 0;
  };
  for (int i = 0; i < k; ++i) {
    const int32_t index = out_row[i * out_stride];
    if (index < 0) {
      scores_row[i] = -std::numeric_limits<float>::infinity();
      continue;
    }
    s.at[filled] = key_of(index);
    s.slot[filled] = i;
    if (++filled == kKeyTile) flush();
  }
  if (filled > 0) flush();
}

// Over rows [0, rows) on the OpenMP threads; prepare(t, row) loads query row t and returns the
// keys its answers address and the map from an answer to a key of them.
template <typename Prepare>
void selected_scores(const TensorView& scores, const TensorView& out, int64_t rows, int k,
                     int threads, Prepare&& prepare) {
#pragma omp parallel num_threads(threads)
  {
    auto scratch = std::make_unique<ScoreScratch>();
#pragma omp for schedule(dynamic, 4)
    for (int64_t t = 0; t < rows; ++t) {
      prepare(t, *scratch, [&](const auto& keys, auto key_of) {
        score_selected(element<float>(scores, t, 0), element<int32_t>(out, t, 0), out.stride[1], k,
                       keys, key_of, *scratch);
      });
    }
  }
}

}  // namespace

void selected_scores_prefill(const TensorView& scores, const TensorView& out,
                             const QuantizedTensor& q, const QuantizedTensor& keys,
                             const TensorView& weights, const TensorView& ks, int k, int threads) {
  const PackedKeys packed(keys);
  selected_scores(scores, out, q.values.shape[0], k, threads,
                  [&](int64_t t, ScoreScratch& s, auto&& run) {
                    load_query_row(s.row, q, t, 0, weights, t);
                    const int64_t start = *element<int32_t>(ks, t);
                    run(packed, [start](int32_t index) { return start + index; });
                  });
}

void selected_scores_decode(const TensorView& scores, const TensorView& out,
                            const QuantizedTensor& q, const PagedKCache& cache,
                            const TensorView& weights, const TensorView& block_table, int k,
                            int threads) {
  const int64_t next_n = q.values.shape[1];
  selected_scores(scores, out, q.values.shape[0] * next_n, k, threads,
                  [&](int64_t r, ScoreScratch& s, auto&& run) {
                    load_query_row(s.row, q, r / next_n, r % next_n, weights, r);
                    const PagedKeys paged(cache, element<int32_t>(block_table, r / next_n, 0));
                    run(paged, [](int32_t index) { return static_cast<int64_t>(index); });
                  });
}

}  // namespace flashindexer::cpu
