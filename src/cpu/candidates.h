// SPDX-License-Identifier: Apache-2.0
// The CPU backend of the candidate ops (flashindexer/candidates.h) and of the indexer's consumer
// form (IndexerOptions::candidates). Arguments arrive validated by src/api.
#pragma once

#include <cstdint>
#include <vector>

#include "flashindexer/candidates.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cpu {

// The bounds of one logits row as given (ks, ke), before any clamp to the logits width.
struct RowBound {
  int64_t ks;
  int64_t ke;
};

// The visible columns [start, start + count) of a row of a logits `width` wide: [ks, min(ke,
// width)).
struct Visible {
  int64_t start;
  int64_t count;
};
Visible visible_of(const RowBound& b, int64_t width);

// The row's blocks named by its candidates that hold a visible position (block < row_blocks),
// ascending, each once: what the exact consumer selects among.
void kept_blocks(std::vector<int64_t>& blocks, const int32_t* candidates, int64_t stride,
                 int64_t count, int64_t row_blocks);

// The bounds of rows [0, count) of the candidate ops' CandidateRows.
std::vector<RowBound> candidate_row_bounds(const CandidateRows& rows, int64_t count);

// One row's blocks of select_candidate_blocks from its block maxima (block_max[b]: the max of
// block b's logits with NaN read as +inf, -inf for none; the newest block, row_blocks - 1, is
// pinned here): out_row[i * out_stride] for i < num_blocks. `keys` is scratch.
void select_row_blocks(int32_t* out_row, int64_t out_stride, const float* block_max,
                       int64_t row_blocks, int num_blocks, std::vector<uint64_t>& keys);

void select_candidate_blocks(const TensorView& out, const TensorView& logits,
                             const std::vector<RowBound>& bounds, int num_blocks, int block_size,
                             int threads);
void apply_candidate_mask(const TensorView& logits, const std::vector<RowBound>& bounds,
                          const TensorView& candidates, int block_size, int threads);
// With vllm_compatible the logits are masked in place first.
void candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                            const std::vector<RowBound>& bounds, const TensorView& candidates,
                            int block_size, int k, bool sorted, bool vllm_compatible, int threads);
void candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                        const TensorView& candidates,
                                        const std::vector<RowBound>& bounds, int block_size,
                                        int sparse_block, int threads);
void sparse_topk_remap(const TensorView& out, const TensorView& columns,
                       const TensorView& sparse_indices, const std::vector<RowBound>& bounds,
                       int sparse_block, int threads);

// indexer_prefill / indexer_decode of a consumer layer, with the indexer's own row ranges as
// bounds and the logits width keys.shape[0] (prefill) or block_table.shape[1] * page_size
// (decode), which places vLLM's edge column. Exact form: each row scores only the keys of its
// candidate blocks (the CPU scoring core's bits, so equal to candidate_topk_per_row over
// mqa_logits) and selects among them. vLLM-compatible form: the logits of a batch of rows, then
// candidate_topk_per_row over them (it selects from outside the blocks too).
void candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                               const QuantizedTensor& keys, const TensorView& weights,
                               const TensorView& ks, const TensorView& ke, int k, bool sorted,
                               const CandidateInput& candidates, int threads);
void candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                              const PagedKCache& cache, const TensorView& weights,
                              const TensorView& context_lens, const TensorView& block_table, int k,
                              bool sorted, const CandidateInput& candidates, int threads);

// sparse_mqa_logits / paged_sparse_mqa_logits (candidates.h): each valid column's key scored
// with the CPU scoring core, a sparse block at a time; `bounds` gives each row's ks (prefill).
void sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights,
                       const TensorView& sparse_indices, const TensorView& end,
                       const std::vector<RowBound>& bounds, int sparse_block, bool clean,
                       int threads);
void paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                             const PagedKCache& cache, const TensorView& weights,
                             const TensorView& sparse_indices, const TensorView& end,
                             const TensorView& block_table, int sparse_block, bool clean,
                             int threads);

}  // namespace flashindexer::cpu
