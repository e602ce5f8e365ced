// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the scoring ops and the indexer ops that score the same inputs.
#pragma once

#include "core/checks.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"

namespace flashindexer {

struct ScoringDims {
  int64_t rows = 0;  // query rows (M, or B * next_n)
  int heads = 0;
  int head_dim = 0;
  bool mxfp4 = false;
};

// q [M, H, D], keys [N, D] (+ scales), weights [M, H] f32, ks/ke [M] i32 with
// 0 <= ks <= ke <= column_limit (values checked on the CPU only: reading them on a GPU would
// need a host synchronisation). column_limit < 0 means N.
ScoringDims check_prefill_scoring(ArgCheck& check, const QuantizedTensor& q,
                                  const QuantizedTensor& keys, const TensorView& weights,
                                  const TensorView& ks, const TensorView& ke, int64_t column_limit);

// q [B, next_n, H, D], the cache, weights [B * next_n, H] f32, context_lens [B] or [B, next_n]
// i32 (non-negative, visible lengths <= column_limit when column_limit >= 0), block_table
// [B, P] i32 whose entries for visible pages lie in [0, num_pages). Values checked on the CPU.
ScoringDims check_paged_scoring(ArgCheck& check, const QuantizedTensor& q, const PagedKCache& cache,
                                const TensorView& weights, const TensorView& context_lens,
                                const TensorView& block_table, int64_t column_limit);

// What check_paged_scoring checks but the lengths: q [B, next_n, H, D], the cache, weights
// [B * next_n, H] f32, block_table [B, P] i32 (shape only).
ScoringDims check_paged_operands(ArgCheck& check, const QuantizedTensor& q,
                                 const PagedKCache& cache, const TensorView& weights,
                                 const TensorView& block_table);

// The cache descriptor itself (shared with insert/gather).
void check_cache(ArgCheck& check, const PagedKCache& cache);

}  // namespace flashindexer
