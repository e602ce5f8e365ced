// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's dense path (dense_indexer.cu): the dense pair, mqa_logits or
// paged_mqa_logits into a logits slab of the caller's workspace + topk_per_row, in row batches,
// with the optional outputs (scores, candidate blocks) read from each batch's slab.
// Internal: indexer.cu dispatches to it (and the fused path's entries, sm90_fused/fused_indexer.h).
#pragma once

#include "cuda/cuda_ops.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

Status dense_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, int k, bool sorted,
                             const IndexerOutputs& outputs, const RunOptions& options);
Status dense_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                            const PagedKCache& cache, const TensorView& weights,
                            const TensorView& context_lens, const TensorView& block_table, int k,
                            bool sorted, const IndexerOutputs& outputs, const RunOptions& options);

}  // namespace flashindexer::cuda
