// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer of a consumer layer (IndexerOptions::candidates) on its dense path (the sparse
// one is sparse_indexer.cu): the dense path's row batches
// (cuda/indexer/dense_indexer.cu) with the consumer's selection in place of topk_per_row. Each
// batch is mqa_logits (paged_mqa_logits) into a logits slab, then run_consumer over it, so the
// result is candidate_topk_per_row of the CUDA logits by construction. The fused path's kernels
// publish no logits a consumer could select from, so a consumer call not taking the sparse path
// takes this one. Each batch passes its own rows of q's values and scales (MXFP4's per-block
// scales; FP8 has none).
//
// Workspace (the caller's, as the dense indexer's): the top-k scratch bound for k, the consumer's
// arrays for one batch, then the logits slab; the batch is as many rows as fit. Host code only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/consumer.h"
#include "cuda/candidates/workspace.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/selected_scores.h"
#include "cuda/indexer/slab.h"

namespace flashindexer::cuda {
namespace {

struct ConsumerBatches {
  candidates::ConsumerScratch scratch;  // arrays for `rows` rows, topk_run set
  float* logits = nullptr;
  int64_t pitch = 0;
  int64_t rows = 0;  // rows per batch, a multiple of the row unit
};

Status carve_consumer_batches(const char* op, const RunOptions& options, int64_t width, int k,
                              int num_blocks, int block_size, int64_t row_unit, int64_t group_rows,
                              ConsumerBatches* batches) {
  const size_t topk_bytes = topk_per_row_workspace_bound(k);
  const int64_t pitch = slab_pitch(width);
  const size_t per_row = static_cast<size_t>(pitch) * sizeof(float) +
                         candidates::consumer_array_bytes(1, num_blocks, block_size);
  // Alignment slack: the start, the four consumer arrays, the slab.
  const size_t fixed = topk_bytes + 6 * kSlabAlignment;
  int64_t rows = 0;
  if (Status status =
          rows_that_fit(op, options, k, fixed, per_row, row_unit,
                        concat("a consumer call (candidates) on CUDA tensors with ", width,
                               " keys per row, C=", num_blocks, " and cb=", block_size),
                        &rows);
      !status.ok()) {
    return status;
  }
  if (rows >= group_rows) rows = rows / group_rows * group_rows;
  auto* base = static_cast<unsigned char*>(options.workspace);
  const uintptr_t arrays = align_slab(reinterpret_cast<uintptr_t>(base) + topk_bytes);
  const size_t array_bytes = candidates::consumer_array_bytes(rows, num_blocks, block_size);
  batches->scratch = candidates::carve_consumer_arrays(reinterpret_cast<void*>(arrays), rows,
                                                       num_blocks, block_size);
  batches->scratch.topk_run = options;
  batches->scratch.topk_run.workspace = base;
  batches->scratch.topk_run.workspace_bytes = topk_bytes;
  batches->logits = reinterpret_cast<float*>(align_slab(arrays + array_bytes));
  batches->pitch = pitch;
  batches->rows = rows;
  return Status::Ok();
}

}  // namespace

Status candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                                 const QuantizedTensor& keys, const TensorView& weights,
                                 const TensorView& ks, const TensorView& ke, int k, bool sorted,
                                 const CandidateInput& input, IndexerPath path,
                                 const RunOptions& options, const TensorView& scores) {
  if (sparse_consumer_takes(input, q, path, keys.values.shape[0], kSparseAutoSpansPrefill)) {
    return sparse_candidate_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, input,
                                            options, scores);
  }
  const char* op = "indexer_prefill";
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  const int64_t group_rows = 256 / q.values.shape[1];
  ConsumerBatches batches;
  ConvertedOperands converted;
  if (Status status = carve_prefill_batches(
          options, q, width, group_rows,
          [&](const RunOptions& from, ConsumerBatches* carved) {
            return carve_consumer_batches(op, from, width, k,
                                          static_cast<int>(input.blocks.shape[1]), input.block_size,
                                          1, group_rows, carved);
          },
          &batches, &converted);
      !status.ok()) {
    return status;
  }
  for (int64_t first = 0; first < rows; first += batches.rows) {
    const int64_t count = std::min(batches.rows, rows - first);
    const TensorView logits =
        TensorView::contiguous(batches.logits, DType::kF32, {count, width}, Device::kCUDA)
            .with_row_stride(batches.pitch);
    const TensorView batch_ks = leading_rows(ks, first, count);
    const TensorView batch_ke = leading_rows(ke, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count),
                                  leading_rows(q.scales, first, count)};
    if (Status status = mqa_logits(logits, batch_q, keys, leading_rows(weights, first, count),
                                   batch_ks, batch_ke, /*clean=*/false, options.cuda_stream,
                                   converted.workspace, converted.bytes, &converted.keys_ready);
        !status.ok()) {
      return status;
    }
    const candidates::BoundRows bounds =
        candidates::bound_rows_of(CandidateRows::prefill(batch_ks, batch_ke));
    const TensorView batch_out = leading_rows(out, first, count);
    if (Status status =
            candidates::run_consumer(op, batch_out.ptr<int32_t>(), out.stride[0],
                                     {batches.logits, batches.pitch, count, width}, bounds,
                                     candidates::candidate_rows_of(input, first), k, sorted,
                                     input.vllm_compatible, batches.scratch);
        !status.ok()) {
      return status;
    }
    // The exact form leaves the slab as scored (the API refuses scores with the masking form).
    if (scores.defined()) {
      if (Status status = gather_selected_scores(leading_rows(scores, first, count), batch_out,
                                                 logits, bounds, k, options.cuda_stream);
          !status.ok()) {
        return status;
      }
    }
  }
  return Status::Ok();
}

Status candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                                const PagedKCache& cache, const TensorView& weights,
                                const TensorView& context_lens, const TensorView& block_table,
                                int k, bool sorted, const CandidateInput& input, IndexerPath path,
                                const RunOptions& options, const TensorView& scores) {
  if (sparse_consumer_takes(input, q, path, block_table.shape[1] * cache.page_size,
                            kSparseAutoSpansDecode)) {
    return sparse_candidate_indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                           sorted, input, options, scores);
  }
  const char* op = "indexer_decode";
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  const int64_t width = block_table.shape[1] * cache.page_size;
  ConsumerBatches batches;
  if (Status status =
          carve_consumer_batches(op, options, width, k, static_cast<int>(input.blocks.shape[1]),
                                 input.block_size, next_n, next_n, &batches);
      !status.ok()) {
    return status;
  }
  const int64_t requests_per_batch = batches.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const int64_t batch_rows = count * next_n;
    const TensorView logits =
        TensorView::contiguous(batches.logits, DType::kF32, {batch_rows, width}, Device::kCUDA)
            .with_row_stride(batches.pitch);
    const TensorView batch_lens = leading_rows(context_lens, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count),
                                  leading_rows(q.scales, first, count)};
    if (Status status = paged_mqa_logits(logits, batch_q, cache,
                                         leading_rows(weights, first * next_n, batch_rows),
                                         batch_lens, leading_rows(block_table, first, count),
                                         /*clean=*/false, options.cuda_stream);
        !status.ok()) {
      return status;
    }
    // The indexer's own visibility: [B, next_n] lengths read flat, or the causal 1-D form.
    candidates::BoundRows bounds = candidates::bound_rows_of(CandidateRows::decode(batch_lens));
    if (batch_lens.rank == 1 && next_n > 1) bounds.causal_next_n = next_n;
    const TensorView batch_out = leading_rows(out, first * next_n, batch_rows);
    if (Status status =
            candidates::run_consumer(op, batch_out.ptr<int32_t>(), out.stride[0],
                                     {batches.logits, batches.pitch, batch_rows, width}, bounds,
                                     candidates::candidate_rows_of(input, first * next_n), k,
                                     sorted, input.vllm_compatible, batches.scratch);
        !status.ok()) {
      return status;
    }
    if (scores.defined()) {
      if (Status status = gather_selected_scores(leading_rows(scores, first * next_n, batch_rows),
                                                 batch_out, logits, bounds, k, options.cuda_stream);
          !status.ok()) {
        return status;
      }
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
