// SPDX-License-Identifier: Apache-2.0
// The CPU scoring core, shared by mqa_logits, paged_mqa_logits and the indexer ops so that the
// logits they produce are the same bits.
//
// Arithmetic of one score, identical on every SIMD target and thread count:
//   dot_h = q_h[0] * k[0] + q_h[1] * k[1] + ... in order of d, one rounding per addition (the
//           products of FP8 values are exact in fp32, so a fused multiply-add changes nothing)
//   total = sum over h in order of  W[h] * relu(dot_h)   (a rounded multiply, then an add)
//   score = kscale * total      (kscale = 1 for MXFP4 keys, whose scales are in the values)
// relu keeps NaN (a NaN code in a garbage cache gives a NaN score, as in the reference).
//
// Work is organised in key tiles: kKeyTile keys are dequantized once into a transposed tile and
// scored against every query row of a row block while the tile is hot in cache.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/elements.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"

namespace flashindexer::cpu {

inline constexpr int kMaxHeads = 64;
inline constexpr int kMaxScoringHeadDim = 128;
// Keys per tile: a multiple of 3 vectors on every target (1, 4, 8 or 16 lanes), and a
// transposed tile of 128 x 48 floats (24 KiB) that fits the L1 of any x86 core.
inline constexpr int kKeyTile = 48;
// Query rows scored against one tile before the next tile is loaded.
inline constexpr int kRowBlock = 4;

// One query row, dequantized: q [H][D] floats and its weights [H].
struct QueryRow {
  alignas(64) float q[kMaxHeads * kMaxScoringHeadDim];
  alignas(64) float weights[kMaxHeads];
  int heads = 0;
  int head_dim = 0;
};

// kKeyTile keys, dequantized and transposed: values[d * kKeyTile + i] is element d of key i.
// Lanes past the keys loaded are zero (their scores are computed and ignored).
struct KeyTile {
  alignas(64) float values[kMaxScoringHeadDim * kKeyTile];
  alignas(64) float scales[kKeyTile];
};

// Fills `row` from query row (b, j) of q ([M, H, D] with j = 0, or [B, next_n, H, D]) and
// weight row `weight_row` of weights [rows, H].
void load_query_row(QueryRow& row, const QuantizedTensor& q, int64_t b, int64_t j,
                    const TensorView& weights, int64_t weight_row);

// scores[i] = score of key i of the tile against `row`, for all kKeyTile lanes (SIMD, dispatched
// at run time to the best target of the CPU).
void score_tile(float* scores, const QueryRow& row, const KeyTile& tile);

// Where one key's bytes are: D (FP8) or D/2 (MXFP4) value bytes and its scale bytes.
struct KeyBytes {
  const uint8_t* values;
  const uint8_t* scales;
};

// Keys of the packed prefill workspace: values [N, D] e4m3 + scales [N] f32, or MXFP4.
class PackedKeys {
 public:
  explicit PackedKeys(const QuantizedTensor& keys)
      : keys_(keys), mxfp4_(keys.values.dtype == DType::kE2M1x2) {}
  bool mxfp4() const { return mxfp4_; }
  // Where keys [first, first + count) are: out[i] for key first + i.
  void gather(int64_t first, int count, KeyBytes* out) const {
    for (int i = 0; i < count; ++i) {
      const int64_t s = first + i;
      out[i] = {element<uint8_t>(keys_.values, s, 0),
                mxfp4_ ? element<uint8_t>(keys_.scales, s, 0)
                       : reinterpret_cast<const uint8_t*>(element<float>(keys_.scales, s))};
    }
  }

 private:
  const QuantizedTensor& keys_;
  bool mxfp4_;
};

// Keys of one request in the paged cache, addressed by context position.
class PagedKeys {
 public:
  PagedKeys(const PagedKCache& cache, const int32_t* block_table_row)
      : block_table_row_(block_table_row),
        data_(static_cast<const uint8_t*>(cache.data)),
        page_stride_(cache.page_stride_bytes),
        page_size_(cache.page_size),
        value_bytes_(cache.value_bytes_per_key()),
        scale_bytes_(cache.scale_bytes_per_key()),
        mxfp4_(cache.format == KFormat::kMXFP4) {}
  bool mxfp4() const { return mxfp4_; }
  // Where positions [first, first + count) are: out[i] for position first + i. Walks the pages
  // (one division per call, not per key: this runs for every key tile of every decode row).
  void gather(int64_t first, int count, KeyBytes* out) const {
    int64_t page = first / page_size_;
    int64_t slot = first - page * page_size_;
    const uint8_t* base = page_base(page);
    for (int i = 0; i < count; ++i) {
      if (slot == page_size_) {
        base = page_base(++page);
        slot = 0;
      }
      out[i] = {base + slot * value_bytes_, base + page_size_ * value_bytes_ + slot * scale_bytes_};
      ++slot;
    }
  }

 private:
  const uint8_t* page_base(int64_t page) const {
    return data_ + static_cast<int64_t>(block_table_row_[page]) * page_stride_;
  }
  const int32_t* block_table_row_;
  const uint8_t* data_;
  int64_t page_stride_;
  int64_t page_size_;
  int64_t value_bytes_;
  int64_t scale_bytes_;
  bool mxfp4_;
};

// Writes column i of tile rows [0, head_dim) from the e4m3 codes values[i], i < count (SIMD
// conversion and 8 x 8 transposes where the CPU has 256-bit vectors; src/cpu/tile_load.cpp).
void decode_fp8_tile(float* tile, const uint8_t* const* values, int count, int head_dim);

// Dequantizes keys [first, first + count) of `keys` into `tile` (count <= kKeyTile).
template <typename Keys>
void load_key_tile(KeyTile& tile, const Keys& keys, int64_t first, int count, int head_dim) {
  KeyBytes bytes[kKeyTile];
  keys.gather(first, count, bytes);
  if (keys.mxfp4()) {
    for (int i = 0; i < count; ++i) {
      decode_mxfp4_column(tile.values + i, kKeyTile, bytes[i].values, bytes[i].scales, head_dim);
      tile.scales[i] = 1.0f;
    }
  } else {
    const uint8_t* values[kKeyTile] = {};  // zeroed: GCC cannot see that only [0, count) is read
    for (int i = 0; i < count; ++i) {
      values[i] = bytes[i].values;
      std::memcpy(&tile.scales[i], bytes[i].scales, sizeof(float));
    }
    decode_fp8_tile(tile.values, values, count, head_dim);
  }
  for (int i = count; i < kKeyTile; ++i) {
    for (int d = 0; d < head_dim; ++d) tile.values[d * kKeyTile + i] = 0.0f;
    tile.scales[i] = 0.0f;
  }
}

// A block of query rows scored together: row r sees keys [row_start[r], row_end[r]), of which
// keys [start[r], end[r]) are scored now (all of them, or one segment when the block's keys are
// split across threads; see row_blocks.h).
struct RowBlock {
  const QueryRow* rows[kRowBlock];
  int64_t row_start[kRowBlock];
  int64_t row_end[kRowBlock];
  int64_t start[kRowBlock];
  int64_t end[kRowBlock];
  int count = 0;
};

// The smallest range [low, high) holding the non-empty ranges [start[r], end[r]), r < count;
// low >= high when all are empty.
struct KeySpan {
  int64_t low = INT64_MAX;
  int64_t high = INT64_MIN;
  bool empty() const { return low >= high; }
};
inline KeySpan key_span(const int64_t* start, const int64_t* end, int count) {
  KeySpan span;
  for (int r = 0; r < count; ++r) {
    if (start[r] >= end[r]) continue;
    span.low = std::min(span.low, start[r]);
    span.high = std::max(span.high, end[r]);
  }
  return span;
}

// Scores every visible key of every row of the block, tile by tile, and hands each row's scores
// to consume(r, first_key, scores, n): scores[i] is the score of key first_key + i.
template <typename Keys, typename Consume>
void score_row_block(const RowBlock& block, const Keys& keys, Consume&& consume) {
  const KeySpan span = key_span(block.start, block.end, block.count);
  if (span.empty()) return;
  const int64_t low = span.low;
  const int64_t high = span.high;
  const int head_dim = block.rows[0]->head_dim;
  KeyTile tile;
  alignas(64) float scores[kKeyTile];
  for (int64_t tile_start = low; tile_start < high; tile_start += kKeyTile) {
    const int64_t tile_end = std::min<int64_t>(tile_start + kKeyTile, high);
    load_key_tile(tile, keys, tile_start, static_cast<int>(tile_end - tile_start), head_dim);
    for (int r = 0; r < block.count; ++r) {
      const int64_t first = std::max(tile_start, block.start[r]);
      const int64_t last = std::min(tile_end, block.end[r]);
      if (first >= last) continue;
      score_tile(scores, *block.rows[r], tile);
      consume(r, first, scores + (first - tile_start), last - first);
    }
  }
}

}  // namespace flashindexer::cpu
