// SPDX-License-Identifier: Apache-2.0
// The fused CUDA indexer's internal entries (fused_indexer.cu): what indexer.cu dispatches to,
// and what the tests call to choose the candidate slots. Host code of the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashindexer/candidates.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

struct FusedConfig {
  // Candidate slots per row; 0: heuristics::fused_candidate_capacity(k). Fewer slots make small
  // inputs exercise the overflow fallback.
  int capacity = 0;
};

// indexer_prefill / indexer_decode by the fused path: top-k without writing the [rows, keys]
// logits, bit for bit topk_per_row(mqa_logits(...)). Same workspace as the dense path. scores
// (optional, [rows, >= k] f32): the selected keys' scores (IndexerOptions::scores). source
// (optional, a block size that is a multiple of 8): a source layer's candidate blocks
// (IndexerOptions::candidate_source), select_candidate_blocks of the logits the scan never
// writes, bit for bit.
Status fused_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, int k, bool sorted,
                             const RunOptions& options, const FusedConfig& config = {},
                             const TensorView& scores = {}, const CandidateOutput& source = {});
Status fused_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                            const PagedKCache& cache, const TensorView& weights,
                            const TensorView& context_lens, const TensorView& block_table, int k,
                            bool sorted, const RunOptions& options, const FusedConfig& config = {},
                            const TensorView& scores = {}, const CandidateOutput& source = {});

// A workspace in which the fused path runs at least `batch_rows` rows per batch (and its
// fallback as many), for rows of `width` keys.
size_t fused_indexer_workspace_size(int64_t batch_rows, int64_t width, int k,
                                    const FusedConfig& config = {});

}  // namespace flashindexer::cuda
