// CPU scoring ops: OpenMP over row blocks, keys in tiles shared by the rows of a block.
#include <cstring>
#include <limits>

#include "cpu/cpu_ops.h"
#include "cpu/row_blocks.h"

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
  const PrefillBlocks blocks{logits.shape[0]};
  const PackedKeys packed(keys);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_prefill_block(block, rows, blocks, b, q, weights, ks, ke);
    const int64_t first_row = blocks.first_row(b);
    score_row_block(block, packed, [&](int r, int64_t first, const float* scores, int64_t n) {
      std::memcpy(element<float>(logits, first_row + r, first), scores, n * sizeof(float));
    });
    if (!clean) continue;
    for (int r = 0; r < block.count; ++r) {
      fill_outside(element<float>(logits, first_row + r, 0), logits.shape[1], block.start[r],
                   block.end[r]);
    }
  }
}

void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean, int threads) {
  const int next_n = static_cast<int>(q.values.shape[1]);
  const DecodeBlocks blocks{q.values.shape[0], next_n};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_decode_block(block, rows, blocks, b, q, weights, context_lens);
    const int64_t first_row = blocks.first_row(b);
    const PagedKeys paged(cache, element<int32_t>(block_table, blocks.request(b), 0));
    score_row_block(block, paged, [&](int r, int64_t first, const float* scores, int64_t n) {
      std::memcpy(element<float>(logits, first_row + r, first), scores, n * sizeof(float));
    });
    if (!clean) continue;
    for (int r = 0; r < block.count; ++r) {
      fill_outside(element<float>(logits, first_row + r, 0), logits.shape[1], 0, block.end[r]);
    }
  }
}

}  // namespace flashindexer::cpu
