#include "cpu/row_blocks.h"

namespace flashindexer::cpu {

void load_prefill_block(RowBlock& block, QueryRow* rows, const PrefillBlocks& blocks, int64_t b,
                        const QuantizedTensor& q, const TensorView& weights, const TensorView& ks,
                        const TensorView& ke) {
  block.count = blocks.size(b);
  for (int r = 0; r < block.count; ++r) {
    const int64_t t = blocks.first_row(b) + r;
    load_query_row(rows[r], q, t, 0, weights, t);
    block.rows[r] = &rows[r];
    block.start[r] = *element<int32_t>(ks, t);
    block.end[r] = *element<int32_t>(ke, t);
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
    block.start[r] = 0;
    block.end[r] = decode_row_end(context_lens, blocks.next_n, row);
  }
}

}  // namespace flashindexer::cpu
