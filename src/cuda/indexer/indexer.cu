// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer: the dispatch between the dense path (dense_indexer.cu: mqa_logits into a
// logits slab, then topk_per_row) and the fused path (sm90_fused/fused_indexer.cu: no logits
// written). Both are topk_per_row(mqa_logits(...)) bit for bit and take the same workspace, so
// the choice is one of speed only, made by the caller (src/api, core/heuristics.h). Host code only.
#include <cstddef>

#include "core/heuristics.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/dense_indexer.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/fused_indexer.h"

namespace flashindexer::cuda {
namespace {

// kAuto is the dense path here: indexer_prefill's kAuto is resolved by the caller (on its
// min_row_keys, cuda_prefill_path), and at decode the fused path leads on no shape by more than
// the spread between runs (docs/decisions/prefill-path-thresholds.md).
bool use_fused(IndexerPath path) { return path == IndexerPath::kFused; }

}  // namespace

size_t indexer_workspace_size(int k) {
  return topk_per_row_workspace_bound(k) + kSlabAlignment + heuristics::kDefaultSlabBytes;
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       bool sorted, IndexerPath path, const RunOptions& options) {
  if (use_fused(path)) {
    return fused_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, options);
  }
  return dense_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, options);
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, bool sorted, IndexerPath path,
                      const RunOptions& options) {
  if (use_fused(path)) {
    return fused_indexer_decode(out, q, cache, weights, context_lens, block_table, k, sorted,
                                options);
  }
  return dense_indexer_decode(out, q, cache, weights, context_lens, block_table, k, sorted,
                              options);
}

}  // namespace flashindexer::cuda
