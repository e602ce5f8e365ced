// The CPU scoring core, shared by mqa_logits, paged_mqa_logits and the indexer ops so that the
// logits they produce are the same bits.
//
// Arithmetic of one score (the CPU backend's canonical order; the library is compiled with
// -ffp-contract=off so no multiply-add is fused):
//   dot_h   = tree sum of 8 strided fp32 partial sums over d   (lane j sums d = j, j+8, ...)
//   total   = sum over h in order of  W[h] * max(dot_h, 0)
//   score   = kscale * total      (kscale = 1 for MXFP4 keys, whose scales are in the values)
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/elements.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"

namespace flashindexer::cpu {

inline constexpr int kMaxHeads = 64;
inline constexpr int kMaxScoringHeadDim = 128;
inline constexpr int kKeyTile = 64;  // keys dequantized together: 64 x 128 floats = 32 KiB

// One query row, dequantized: q [H][D] floats and its weights [H].
struct QueryRow {
  float q[kMaxHeads * kMaxScoringHeadDim];
  float weights[kMaxHeads];
  int heads = 0;
  int head_dim = 0;
};

// Fills `row` from query row (b, j) of q ([M, H, D] with j = 0, or [B, next_n, H, D]) and
// weight row `weight_row` of weights [rows, H].
void load_query_row(QueryRow& row, const QuantizedTensor& q, int64_t b, int64_t j,
                    const TensorView& weights, int64_t weight_row);

inline float dot_product(const float* a, const float* b, int n) {
  float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int d = 0; d < n; d += 8) {
    for (int j = 0; j < 8; ++j) lane[j] += a[d + j] * b[d + j];
  }
  return ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
}

inline float score_key(const QueryRow& row, const float* key, float key_scale) {
  float total = 0.0f;
  for (int h = 0; h < row.heads; ++h) {
    const float dot = dot_product(row.q + h * row.head_dim, key, row.head_dim);
    total += row.weights[h] * std::max(dot, 0.0f);
  }
  return key_scale * total;
}

// Keys of the packed prefill workspace: values [N, D] e4m3 + scales [N] f32, or MXFP4.
class PackedKeys {
 public:
  explicit PackedKeys(const QuantizedTensor& keys) : keys_(keys) {}
  // Dequantizes keys [first, first + count) into rows [count][D] and their scales.
  void load(int64_t first, int count, float* rows, float* scales, int head_dim) const;

 private:
  const QuantizedTensor& keys_;
};

// Keys of one request in the paged cache, addressed by context position.
class PagedKeys {
 public:
  PagedKeys(const PagedKCache& cache, const int32_t* block_table_row)
      : cache_(cache), block_table_row_(block_table_row) {}
  void load(int64_t first, int count, float* rows, float* scales, int head_dim) const;

 private:
  const PagedKCache& cache_;
  const int32_t* block_table_row_;
};

// scores[i] = score of key first + i, for i < count, in tiles of kKeyTile keys.
template <typename Keys>
void score_keys(float* scores, const QueryRow& row, const Keys& keys, int64_t first,
                int64_t count) {
  alignas(64) float tile[kKeyTile * kMaxScoringHeadDim];
  float tile_scales[kKeyTile];
  for (int64_t begin = 0; begin < count; begin += kKeyTile) {
    const int n = static_cast<int>(std::min<int64_t>(kKeyTile, count - begin));
    keys.load(first + begin, n, tile, tile_scales, row.head_dim);
    for (int i = 0; i < n; ++i) {
      scores[begin + i] = score_key(row, tile + i * row.head_dim, tile_scales[i]);
    }
  }
}

}  // namespace flashindexer::cpu
