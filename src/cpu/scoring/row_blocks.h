// SPDX-License-Identifier: Apache-2.0
// How the CPU scoring ops group query rows into blocks that share key tiles.
//
// Prefill: consecutive rows (mostly one request, whose ranges overlap). Decode: the next_n rows
// of one request, which read the same pages, so each page is dequantized once for all of them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/rows.h"
#include "cpu/scoring/score.h"

namespace flashindexer::cpu {

struct PrefillBlocks {
  int64_t rows;
  int64_t count() const { return (rows + kRowBlock - 1) / kRowBlock; }
  int64_t first_row(int64_t block) const { return block * kRowBlock; }
  int size(int64_t block) const {
    return static_cast<int>(std::min<int64_t>(kRowBlock, rows - first_row(block)));
  }
};

struct DecodeBlocks {
  int64_t batch;
  int next_n;
  int64_t per_request() const { return (next_n + kRowBlock - 1) / kRowBlock; }
  int64_t count() const { return batch * per_request(); }
  int64_t request(int64_t block) const { return block / per_request(); }
  int64_t first_row(int64_t block) const {
    return request(block) * next_n + (block % per_request()) * kRowBlock;
  }
  int size(int64_t block) const {
    const int64_t first_j = (block % per_request()) * kRowBlock;
    return static_cast<int>(std::min<int64_t>(kRowBlock, next_n - first_j));
  }
};

}  // namespace flashindexer::cpu

namespace flashindexer::cpu {

// Loads the query rows of block b into rows[0, size) and describes them in `block`.
void load_prefill_block(RowBlock& block, QueryRow* rows, const PrefillBlocks& blocks, int64_t b,
                        const QuantizedTensor& q, const TensorView& weights, const TensorView& ks,
                        const TensorView& ke);
void load_decode_block(RowBlock& block, QueryRow* rows, const DecodeBlocks& blocks, int64_t b,
                       const QuantizedTensor& q, const TensorView& weights,
                       const TensorView& context_lens);

}  // namespace flashindexer::cpu

namespace flashindexer::cpu {

// When there are fewer row blocks than threads (decode with a small batch), each block's keys
// are split into segments scored by different threads; at most this many per block.
inline constexpr int kMaxKeySegments = 64;

// Segments per block: 1 when the blocks alone give every thread work, else enough that they do.
// Decided from shapes only; no result depends on it (scores are per key, selection is exact).
int segments_per_block(int64_t blocks, int threads);

// Narrows the scored keys [start, end) of every row of `block` to segment `segment` of
// `segments` equal, tile-aligned parts of the block's key range.
void restrict_to_segment(RowBlock& block, int segment, int segments);

// Runs body(block, first_row, item) for every (block, key segment) item of the prefill rows of
// q [M, H, D], item = block index * segments + segment, the block's query rows loaded, on
// `threads` OpenMP threads.
template <typename Body>
void for_each_prefill_block(const QuantizedTensor& q, const TensorView& weights,
                            const TensorView& ks, const TensorView& ke, int threads, int segments,
                            Body&& body) {
  const PrefillBlocks blocks{q.values.shape[0]};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < blocks.count() * segments; ++item) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_prefill_block(block, rows, blocks, item / segments, q, weights, ks, ke);
    restrict_to_segment(block, static_cast<int>(item % segments), segments);
    body(block, blocks.first_row(item / segments), item);
  }
}

// The same for decode rows of q [B, next_n, H, D]: body(block, first_row, request, item).
template <typename Body>
void for_each_decode_block(const QuantizedTensor& q, const TensorView& weights,
                           const TensorView& context_lens, int threads, int segments, Body&& body) {
  const DecodeBlocks blocks{q.values.shape[0], static_cast<int>(q.values.shape[1])};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t item = 0; item < blocks.count() * segments; ++item) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_decode_block(block, rows, blocks, item / segments, q, weights, context_lens);
    restrict_to_segment(block, static_cast<int>(item % segments), segments);
    body(block, blocks.first_row(item / segments), blocks.request(item / segments), item);
  }
}

}  // namespace flashindexer::cpu
