// SPDX-License-Identifier: Apache-2.0
// The oracle of the candidate ops (flashindexer/candidates.h): plain loops written from spec
// §8.2-§8.5, host memory only, no argument checks, clarity over speed.
#pragma once

#include <cstdint>

#include "flashindexer/candidates.h"
#include "flashindexer/tensor.h"

namespace flashindexer::reference {

// The bounds of logits row t as given: ks (0 in the decode form) and ke, unclamped.
struct CandidateBounds {
  int64_t ks;
  int64_t ke;
};
CandidateBounds candidate_bounds(const CandidateRows& rows, int64_t t);

// True when block a ranks before block b under the block order of candidates.h (the scores as
// the blocks' maxima with the newest block already pinned: NaN equal to +inf, ties to the
// smaller id).
bool block_ranks_before(float score_a, int64_t id_a, float score_b, int64_t id_b);

void select_candidate_blocks(const TensorView& out, const TensorView& logits,
                             const CandidateRows& rows, int num_blocks, int block_size);
void apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                          const TensorView& candidates, int block_size);
// Output sorted best first under the total order of topk.h. With vllm_compatible the logits are
// masked in place first (apply_candidate_mask).
void candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                            const CandidateRows& rows, const TensorView& candidates, int block_size,
                            int k, bool vllm_compatible);
void candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                        const TensorView& candidates, const CandidateRows& rows,
                                        int block_size, int sparse_block);
void sparse_topk_remap(const TensorView& out, const TensorView& columns,
                       const TensorView& sparse_indices, const CandidateRows& rows,
                       int sparse_block);

}  // namespace flashindexer::reference
