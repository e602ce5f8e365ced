// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer: the dispatch between the dense path (dense_indexer.cu: mqa_logits into a
// logits slab, then topk_per_row) and the fused path (sm90_fused/fused_indexer.cu: no logits
// written). Both are topk_per_row(mqa_logits(...)) bit for bit and take the same workspace, so
// the choice is one of speed only, made by the caller (src/api, core/heuristics.h). Host code only.
#include <algorithm>
#include <cstddef>

#include "core/checks.h"
#include "core/heuristics.h"
#include "cuda/candidates/select.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/dense_indexer.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/fused_indexer.h"

namespace flashindexer::cuda {
namespace {

// kAuto is the dense path here: indexer_prefill's kAuto is resolved by the caller (on its
// min_row_keys, cuda_prefill_path), and at decode the fused path leads on no shape by more than
// the spread between runs (docs/decisions/prefill-path-thresholds.md).
// An MXFP4 source layer takes the dense path whatever is asked: the fused scan folds each score
// into its block's maximum as it goes, and an out-of-span vector's score is a NaN mark there
// until the dense pair's fix-up computes it (sm90_scoring/format_mxfp4.cuh). Its answer is the
// same (both paths are topk_per_row(mqa_logits(...))); only the speed differs.
bool use_fused(IndexerPath path, const QuantizedTensor& q, const IndexerOutputs& outputs) {
  return path == IndexerPath::kFused &&
         !(q.values.dtype == DType::kE2M1x2 && outputs.candidate_source.defined());
}

}  // namespace

size_t indexer_workspace_size(int k) {
  return topk_per_row_workspace_bound(k) + kSlabAlignment + heuristics::kDefaultSlabBytes;
}

size_t indexer_workspace_size(int k, int num_blocks, int block_size) {
  if (num_blocks < 1 || block_size < 1) return indexer_workspace_size(k);
  // The block scores of as many rows as the default slab holds at any width: a row's are 1/cb
  // of its logits rounded up to 256 bytes, plus its block count (4 bytes), and a slab row is at
  // least 1 KiB; then the two arrays' alignment.
  const size_t slab_rows = heuristics::kDefaultSlabBytes / (kSlabPitchFloats * sizeof(float));
  const size_t block_arrays =
      heuristics::kDefaultSlabBytes / static_cast<size_t>(block_size) + slab_rows * (256 + 4) + 512;
  return topk_per_row_workspace_bound(std::max(k, num_blocks)) + 3 * kSlabAlignment +
         heuristics::kDefaultSlabBytes + block_arrays;
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       bool sorted, IndexerPath path, const IndexerOutputs& outputs,
                       const RunOptions& options) {
  if (use_fused(path, q, outputs)) {
    return fused_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, options, {},
                                 outputs.scores, outputs.candidate_source);
  }
  return dense_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, outputs, options);
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, bool sorted, IndexerPath path,
                      const IndexerOutputs& outputs, const RunOptions& options) {
  if (use_fused(path, q, outputs)) {
    return fused_indexer_decode(out, q, cache, weights, context_lens, block_table, k, sorted,
                                options, {}, outputs.scores, outputs.candidate_source);
  }
  return dense_indexer_decode(out, q, cache, weights, context_lens, block_table, k, sorted, outputs,
                              options);
}

}  // namespace flashindexer::cuda
