// SPDX-License-Identifier: Apache-2.0
#include "cpu/scoring/row_blocks.h"

namespace flashindexer::cpu {

void load_prefill_block(RowBlock& block, QueryRow* rows, const PrefillBlocks& blocks, int64_t b,
                        const QuantizedTensor& q, const TensorView& weights, const TensorView& ks,
                        const TensorView& ke) {
  block.count = blocks.size(b);
  for (int r = 0; r < block.count; ++r) {
    const int64_t t = blocks.first_row(b) + r;
    load_query_row(rows[r], q, t, 0, weights, t);
    block.rows[r] = &rows[r];
    block.row_start[r] = block.start[r] = *element<int32_t>(ks, t);
    block.row_end[r] = block.end[r] = *element<int32_t>(ke, t);
  }
}

void load_decode_block(RowBlock& block, QueryRow* rows, const DecodeBlocks& blocks, int64_t b,
                       const QuantizedTensor& q, const TensorView& weights,
                       const TensorView& context_lens) {
  block.count = blocks.size(b);
  for (int r = 0; r < block.count; ++r) {
    const int64_t row = blocks.first_row(b) + r;
    load_query_row(rows[r], q, row / blocks.next_n, row % blocks.next_n, weights, row);
    block.rows[r] = &rows[r];
    block.row_start[r] = block.start[r] = 0;
    block.row_end[r] = block.end[r] = rows::decode_row_end(context_lens, blocks.next_n, row);
  }
}

int segments_per_block(int64_t blocks, int threads) {
  if (blocks == 0 || blocks >= threads) return 1;
  return static_cast<int>(std::min<int64_t>(kMaxKeySegments, (threads + blocks - 1) / blocks));
}

void restrict_to_segment(RowBlock& block, int segment, int segments) {
  const KeySpan span = key_span(block.row_start, block.row_end, block.count);
  if (segments == 1 || span.empty()) return;
  const int64_t low = span.low;
  const int64_t high = span.high;
  // Segment boundaries on whole tiles from `low`, so no tile is loaded by two segments.
  const int64_t tiles = (high - low + kKeyTile - 1) / kKeyTile;
  const int64_t first = low + tiles * segment / segments * kKeyTile;
  const int64_t last = std::min(high, low + tiles * (segment + 1) / segments * kKeyTile);
  for (int r = 0; r < block.count; ++r) {
    block.start[r] = std::max(block.row_start[r], first);
    block.end[r] = std::max(block.start[r], std::min(block.row_end[r], last));
  }
}

}  // namespace flashindexer::cpu
