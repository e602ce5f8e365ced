// SPDX-License-Identifier: Apache-2.0
// CPU scoring ops: OpenMP over row blocks, keys in tiles shared by the rows of a block.
#include <cstring>
#include <limits>

#include "cpu/cpu_ops.h"
#include "cpu/scoring/row_blocks.h"

namespace flashindexer::cpu {
namespace {

void fill_outside(float* row, int64_t width, int64_t start, int64_t end) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  std::fill(row, row + std::min(start, width), kMinusInf);
  std::fill(row + std::min(std::max<int64_t>(end, 0), width), row + width, kMinusInf);
}

}  // namespace

void mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean,
                int threads) {
  const PackedKeys packed(keys);
  const int segments = segments_per_block(PrefillBlocks{q.values.shape[0]}.count(), threads);
  for_each_prefill_block(
      q, weights, ks, ke, threads, segments,
      [&](const RowBlock& block, int64_t first_row, int64_t item) {
        score_row_block(block, packed, [&](int r, int64_t first, const float* scores, int64_t n) {
          std::memcpy(element<float>(logits, first_row + r, first), scores, n * sizeof(float));
        });
        if (!clean || item % segments != 0) return;
        for (int r = 0; r < block.count; ++r) {
          fill_outside(element<float>(logits, first_row + r, 0), logits.shape[1],
                       block.row_start[r], block.row_end[r]);
        }
      });
}

void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean, int threads) {
  const DecodeBlocks blocks{q.values.shape[0], static_cast<int>(q.values.shape[1])};
  const int segments = segments_per_block(blocks.count(), threads);
  for_each_decode_block(
      q, weights, context_lens, threads, segments,
      [&](const RowBlock& block, int64_t first_row, int64_t request, int64_t item) {
        const PagedKeys paged(cache, element<int32_t>(block_table, request, 0));
        score_row_block(block, paged, [&](int r, int64_t first, const float* scores, int64_t n) {
          std::memcpy(element<float>(logits, first_row + r, first), scores, n * sizeof(float));
        });
        if (!clean || item % segments != 0) return;
        for (int r = 0; r < block.count; ++r) {
          fill_outside(element<float>(logits, first_row + r, 0), logits.shape[1], 0,
                       block.row_end[r]);
        }
      });
}

}  // namespace flashindexer::cpu
