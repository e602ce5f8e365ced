// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's dense path, over a fixed logits slab: rows run in batches, and each batch is
// the dense pair the op must equal bit for bit -- mqa_logits (paged_mqa_logits) into the slab,
// then topk_per_row over it -- so the result is topk_per_row(logits) by construction, for any
// batch size. The slab is the caller's workspace, so memory never grows with rows or keys; the
// batches follow from shapes only (no host sync, graph-capturable). Host code only.
//
// The optional outputs read the same slab before the next batch reuses it: the selected keys'
// scores (a gather, selected_scores.h), and the candidate blocks of a source layer
// (candidates/select.h: the block scores and top-C of select_candidate_blocks), whose block
// scores lie in the region the slab keeps, sized so that both hold the same rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/candidates/select.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/dense_indexer.h"
#include "cuda/indexer/selected_scores.h"
#include "cuda/indexer/slab.h"

namespace flashindexer::cuda {
namespace {

// The slab of a batch and, with a candidate output, the block scores of as many rows.
struct DenseBatches {
  Slab slab;
  int64_t rows = 0;  // rows per batch, a multiple of the row unit
  candidates::BlockSelectScratch source;
};

// The most rows (a multiple of row_unit, at least one unit) whose block arrays fit in `bytes`:
// a binary search over units (the arrays' alignment makes the size a step function).
int64_t block_rows_in(size_t bytes, int64_t width, int block_size, int64_t row_unit) {
  int64_t fits = 1;                                                   // units
  int64_t too_many = static_cast<int64_t>(bytes / 4) / row_unit + 2;  // each row takes >= 4 bytes
  while (too_many - fits > 1) {
    const int64_t mid = fits + (too_many - fits) / 2;
    if (candidates::block_select_array_bytes(mid * row_unit, width, block_size) <= bytes) {
      fits = mid;
    } else {
      too_many = mid;
    }
  }
  return fits * row_unit;
}

Status carve_dense_batches(const char* op, const RunOptions& options, int64_t width, int k,
                           int64_t row_unit, const CandidateOutput& source, DenseBatches* batches) {
  if (!source.defined()) {
    if (Status status = carve_slab(
            op, options, width, k, row_unit, 0, 0, [](size_t) { return size_t{0}; },
            &batches->slab);
        !status.ok()) {
      return status;
    }
    batches->rows = batches->slab.rows;
    return Status::Ok();
  }
  const int num_blocks = static_cast<int>(source.blocks.shape[1]);
  const int block_size = source.block_size;
  const size_t logits_row = static_cast<size_t>(slab_pitch(width)) * sizeof(float);
  const size_t blocks_row = candidates::block_select_array_bytes(1, width, block_size);
  // The region splits in proportion to a row's logits and block scores.
  auto keep = [&](size_t region) {
    const auto fit = static_cast<int64_t>(region / (logits_row + blocks_row));
    return candidates::block_select_array_bytes(std::max<int64_t>(fit, row_unit), width,
                                                block_size);
  };
  // The top-k scratch serves the indexer's top-k and the top-C of the block scores (the bound is
  // the same for every k up to 2048, and one larger value beyond).
  if (Status status = carve_slab(op, options, width, std::max(k, num_blocks), row_unit,
                                 candidates::block_select_array_bytes(row_unit, width, block_size),
                                 0, keep, &batches->slab);
      !status.ok()) {
    return status;
  }
  batches->rows = std::min(batches->slab.rows,
                           block_rows_in(batches->slab.kept_bytes, width, block_size, row_unit));
  batches->source =
      candidates::carve_block_select(batches->slab.kept, batches->rows, width, block_size);
  batches->source.topk_run = batches->slab.topk_run;
  return Status::Ok();
}

// The outputs of rows [first, first + count) from the batch's logits (the slab): scores, then
// candidate blocks under `bounds`.
Status write_outputs(const char* op, const DenseBatches& batches, const IndexerOutputs& outputs,
                     const TensorView& out, const TensorView& logits, const RowRanges& ranges,
                     const candidates::BoundRows& bounds, int64_t first, int64_t count, int k) {
  if (outputs.scores.defined()) {
    if (Status status =
            gather_selected_scores(leading_rows(outputs.scores, first, count), out, logits, ranges,
                                   k, EmptyScoreRows::kWrite, batches.slab.topk_run.cuda_stream);
        !status.ok()) {
      return status;
    }
  }
  const CandidateOutput& source = outputs.candidate_source;
  if (source.defined()) {
    const TensorView blocks = leading_rows(source.blocks, first, count);
    return candidates::select_blocks(
        op, blocks.ptr<int32_t>(), blocks.stride[0],
        {logits.ptr<float>(), logits.stride[0], count, logits.shape[1]}, bounds,
        static_cast<int>(source.blocks.shape[1]), source.block_size, batches.source);
  }
  return Status::Ok();
}

}  // namespace

Status dense_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, int k, bool sorted,
                             const IndexerOutputs& outputs, const RunOptions& options) {
  const char* op = "indexer_prefill";
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  // Whole scoring groups (4 rows at H = 64, 8 at H = 32) per batch when the slab allows.
  const int64_t group_rows = 256 / q.values.shape[1];
  DenseBatches batches;
  ConvertedOperands converted;
  if (Status status = carve_prefill_batches(
          options, q, width, group_rows,
          [&](const RunOptions& from, DenseBatches* carved) {
            return carve_dense_batches(op, from, width, k, 1, outputs.candidate_source, carved);
          },
          &batches, &converted);
      !status.ok()) {
    return status;
  }
  const int64_t batch =
      batches.rows >= group_rows ? batches.rows / group_rows * group_rows : batches.rows;
  for (int64_t first = 0; first < rows; first += batch) {
    const int64_t count = std::min(batch, rows - first);
    const TensorView logits = slab_view(batches.slab, count, width);
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
    const TensorView batch_out = leading_rows(out, first, count);
    const RowRanges ranges = RowRanges::prefill(batch_ks, batch_ke);
    if (Status status = topk_per_row(batch_out, logits, ranges, k, sorted, batches.slab.topk_run);
        !status.ok()) {
      return status;
    }
    if (Status status = write_outputs(
            op, batches, outputs, batch_out, logits, ranges,
            candidates::bound_rows_of(CandidateRows::prefill(batch_ks, batch_ke)), first, count, k);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

Status dense_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                            const PagedKCache& cache, const TensorView& weights,
                            const TensorView& context_lens, const TensorView& block_table, int k,
                            bool sorted, const IndexerOutputs& outputs, const RunOptions& options) {
  const char* op = "indexer_decode";
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  // Every visible length fits the block table, so its capacity is the logits width.
  const int64_t width = block_table.shape[1] * cache.page_size;
  DenseBatches batches;
  if (Status status =
          carve_dense_batches(op, options, width, k, next_n, outputs.candidate_source, &batches);
      !status.ok()) {
    return status;
  }
  const int64_t requests_per_batch = batches.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const int64_t batch_rows = count * next_n;
    const TensorView logits = slab_view(batches.slab, batch_rows, width);
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
    const TensorView batch_out = leading_rows(out, first * next_n, batch_rows);
    const RowRanges ranges = RowRanges::decode(batch_lens, next_n);
    if (Status status = topk_per_row(batch_out, logits, ranges, k, sorted, batches.slab.topk_run);
        !status.ok()) {
      return status;
    }
    // Each row sees [0, its decode length): [B, next_n] lengths read flat, or the causal 1-D
    // form (the consumer's bounds, consumer_indexer.cu).
    candidates::BoundRows bounds = candidates::bound_rows_of(CandidateRows::decode(batch_lens));
    if (batch_lens.rank == 1 && next_n > 1) bounds.causal_next_n = next_n;
    if (Status status = write_outputs(op, batches, outputs, batch_out, logits, ranges, bounds,
                                      first * next_n, batch_rows, k);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
