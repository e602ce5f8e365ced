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

// The bounds of rows [0, count) of the candidate ops' CandidateRows.
std::vector<RowBound> candidate_row_bounds(const CandidateRows& rows, int64_t count);

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

// indexer_prefill / indexer_decode of a consumer layer: the logits of a batch of rows (the CPU
// logits ops' bits, as the CPU indexer's), then candidate_topk_per_row over them, with the
// indexer's own row ranges as bounds. The logits width is keys.shape[0] (prefill) and
// block_table.shape[1] * page_size (decode), which places vLLM's edge column.
void candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                               const QuantizedTensor& keys, const TensorView& weights,
                               const TensorView& ks, const TensorView& ke, int k, bool sorted,
                               const CandidateInput& candidates, int threads);
void candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                              const PagedKCache& cache, const TensorView& weights,
                              const TensorView& context_lens, const TensorView& block_table, int k,
                              bool sorted, const CandidateInput& candidates, int threads);

}  // namespace flashindexer::cpu
