// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer of a consumer layer on its sparse path: only the keys of each row's candidate
// blocks are scored. Per batch of rows: the rows metadata (sparse_rows.cu: sorted distinct sparse
// blocks, their entries, valid columns), the sparse scoring kernel into a slab of sparse logits
// (a row's C x cb columns, not its context), the top-k of each row over its valid columns, and
// the remap of the selected columns to positions. A key's score has the dense kernels' bits
// (format_sparse.cuh), the columns ascend with the positions, and every visible candidate
// position is a column exactly once, so the answer is the dense consumer's exact one, bit for bit.
//
// Workspace (the caller's): the top-k scratch bound for k, then per row its blocks, entries and
// end, and a slab row of C x cb sparse logits; a batch is as many rows as fit. Host code only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/sparse_rows.h"
#include "cuda/candidates/workspace.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/selected_scores.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_scoring/sparse_call.h"

namespace flashindexer::cuda {
namespace {

struct SparseBatches {
  candidates::SparseRows arrays;  // for `rows` rows
  float* logits = nullptr;
  int64_t pitch = 0;
  int64_t rows = 0;  // rows per batch, a multiple of the row unit
  int sparse_block = 0;
  RunOptions topk_run;
};

Status carve_sparse_batches(const char* op, const RunOptions& options, int k,
                            const CandidateInput& input, int64_t row_unit, SparseBatches* batches) {
  const int sparse_block = candidates::sparse_block_of(input.block_size);
  const int per_row_blocks =
      static_cast<int>(input.blocks.shape[1]) * (input.block_size / sparse_block);
  const size_t topk_bytes = topk_per_row_workspace_bound(k);
  const int64_t pitch = slab_pitch(int64_t{per_row_blocks} * sparse_block);
  const int64_t array_stride = candidates::pitch_floats(per_row_blocks);  // 256-byte rows
  const size_t per_row = (static_cast<size_t>(pitch) + 2 * array_stride + 1) * sizeof(int32_t);
  const size_t fixed = topk_bytes + 5 * kSlabAlignment;  // alignment of each region
  int64_t rows = 0;
  if (Status status = rows_that_fit(op, options, k, fixed, per_row, row_unit,
                                    concat("the sparse consumer path on CUDA tensors with C=",
                                           input.blocks.shape[1], " and cb=", input.block_size),
                                    &rows);
      !status.ok()) {
    return status;
  }
  auto* base = static_cast<unsigned char*>(options.workspace);
  const uintptr_t blocks = align_slab(reinterpret_cast<uintptr_t>(base) + topk_bytes);
  const size_t array_bytes = static_cast<size_t>(rows * array_stride) * sizeof(int32_t);
  const uintptr_t entries = align_slab(blocks + array_bytes);
  const uintptr_t end = align_slab(entries + array_bytes);
  batches->arrays = {reinterpret_cast<int32_t*>(blocks), reinterpret_cast<int32_t*>(entries),
                     reinterpret_cast<int32_t*>(end), array_stride, per_row_blocks};
  batches->logits = reinterpret_cast<float*>(align_slab(end + rows * sizeof(int32_t)));
  batches->pitch = pitch;
  batches->rows = rows;
  batches->sparse_block = sparse_block;
  batches->topk_run = options;
  batches->topk_run.workspace = base;
  batches->topk_run.workspace_bytes = topk_bytes;
  return Status::Ok();
}

// Scores the batch's rows (their metadata built), selects over each row's valid columns and
// remaps the selection to positions, into `out` (the batch's rows of the output); with `scores`
// defined, the selected keys' scores too, read from the sparse logits before the remap.
Status score_and_select(const char* op, const SparseBatches& batches, cuda::SparseScoring scoring,
                        int64_t count, const TensorView& out, const TensorView& scores, int k,
                        bool sorted) {
  const int64_t width = int64_t{batches.arrays.sparse_per_row} * batches.sparse_block;
  scoring.logits =
      TensorView::contiguous(batches.logits, DType::kF32, {count, width}, Device::kCUDA)
          .with_row_stride(batches.pitch);
  scoring.entries = batches.arrays.entries;
  scoring.entry_stride = batches.arrays.stride;
  scoring.entries_per_row = batches.arrays.sparse_per_row;
  scoring.end = batches.arrays.end;
  scoring.sparse_block = batches.sparse_block;
  if (Status status =
          launch_sparse_scoring(op, scoring, /*clean=*/false, batches.topk_run.cuda_stream);
      !status.ok()) {
    return status;
  }
  const TensorView end =
      TensorView::contiguous(batches.arrays.end, DType::kI32, {count}, Device::kCUDA);
  if (Status status =
          topk_per_row(out, scoring.logits, RowRanges::decode(end), k, sorted, batches.topk_run);
      !status.ok()) {
    return status;
  }
  if (scores.defined()) {
    if (Status status =
            gather_selected_scores(scores, out, scoring.logits, RowRanges::decode(end), k,
                                   EmptyScoreRows::kWrite, batches.topk_run.cuda_stream);
        !status.ok()) {
      return status;
    }
  }
  const TensorView blocks =
      TensorView::contiguous(batches.arrays.blocks, DType::kI32,
                             {count, batches.arrays.sparse_per_row}, Device::kCUDA)
          .with_row_stride(batches.arrays.stride);
  TensorView selected = out;
  selected.shape[1] = k;
  return sparse_topk_remap(selected, selected, blocks, CandidateRows{}, batches.sparse_block,
                           batches.topk_run.cuda_stream);
}

}  // namespace

bool sparse_consumer_takes(const CandidateInput& input, IndexerPath path, int64_t width,
                           int64_t auto_spans) {
  if (input.vllm_compatible || candidates::sparse_block_of(input.block_size) == 0) return false;
  if (path == IndexerPath::kSparse) return true;
  const int64_t span = input.blocks.shape[1] * static_cast<int64_t>(input.block_size);
  return path == IndexerPath::kAuto && width >= auto_spans * span;
}

Status sparse_candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                                        const QuantizedTensor& keys, const TensorView& weights,
                                        const TensorView& ks, const TensorView& ke, int k,
                                        bool sorted, const CandidateInput& input,
                                        const RunOptions& options, const TensorView& scores) {
  const char* op = "indexer_prefill";
  const int64_t rows = q.values.shape[0];
  SparseBatches batches;
  if (Status status = carve_sparse_batches(op, options, k, input, 1, &batches); !status.ok()) {
    return status;
  }
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  for (int64_t first = 0; first < rows; first += batches.rows) {
    const int64_t count = std::min(batches.rows, rows - first);
    const TensorView batch_ks = leading_rows(ks, first, count);
    const TensorView batch_ke = leading_rows(ke, first, count);
    if (Status status = candidates::build_sparse_rows(
            batches.arrays, candidates::candidate_rows_of(input, first),
            candidates::bound_rows_of(CandidateRows::prefill(batch_ks, batch_ke)), count,
            keys.values.shape[0], batches.sparse_block, candidates::SparseSource{}, stream);
        !status.ok()) {
      return status;
    }
    SparseScoring scoring;
    scoring.q = leading_rows(q.values, first, count);
    scoring.weights = leading_rows(weights, first, count);
    scoring.keys = &keys;
    if (Status status =
            score_and_select(op, batches, scoring, count, leading_rows(out, first, count),
                             leading_rows(scores, first, count), k, sorted);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

Status sparse_candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                                       const PagedKCache& cache, const TensorView& weights,
                                       const TensorView& context_lens,
                                       const TensorView& block_table, int k, bool sorted,
                                       const CandidateInput& input, const RunOptions& options,
                                       const TensorView& scores) {
  const char* op = "indexer_decode";
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  const int64_t width = block_table.shape[1] * cache.page_size;
  if (Status status = check_sparse_paged_source(op, q, cache); !status.ok()) return status;
  SparseBatches batches;
  if (Status status = carve_sparse_batches(op, options, k, input, next_n, &batches); !status.ok()) {
    return status;
  }
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  const int64_t requests_per_batch = batches.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const int64_t batch_rows = count * next_n;
    const TensorView batch_lens = leading_rows(context_lens, first, count);
    // The indexer's own visibility: [B, next_n] lengths read flat, or the causal 1-D form.
    candidates::BoundRows bounds = candidates::bound_rows_of(CandidateRows::decode(batch_lens));
    if (batch_lens.rank == 1 && next_n > 1) bounds.causal_next_n = next_n;
    const TensorView batch_table = leading_rows(block_table, first, count);
    const candidates::SparseSource source = candidates::paged_source(batch_table, cache, next_n);
    if (Status status = candidates::build_sparse_rows(
            batches.arrays, candidates::candidate_rows_of(input, first * next_n), bounds,
            batch_rows, width, batches.sparse_block, source, stream);
        !status.ok()) {
      return status;
    }
    SparseScoring scoring;
    scoring.q = decode_query_rows(q.values, first, count);
    scoring.weights = leading_rows(weights, first * next_n, batch_rows);
    scoring.cache = &cache;
    if (Status status = score_and_select(
            op, batches, scoring, batch_rows, leading_rows(out, first * next_n, batch_rows),
            leading_rows(scores, first * next_n, batch_rows), k, sorted);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
