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
#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/sparse_call.h"

namespace flashindexer::cuda {
namespace {

struct SparseBatches {
  candidates::SparseRows arrays;  // for `rows` rows, or every row's when `prebuilt`
  bool prebuilt = false;          // CandidateInput::sparse_rows: the step's, built once
  float* logits = nullptr;
  int64_t pitch = 0;
  int64_t rows = 0;  // rows per batch, a multiple of the row unit
  int sparse_block = 0;
  RunOptions topk_run;
};

// A batch is as many rows as the workspace holds: a slab row of sparse logits each, and its
// metadata arrays unless the step's prebuilt ones (for its `total_rows` rows) are given.
Status carve_sparse_batches(const char* op, const RunOptions& options, int k,
                            const CandidateInput& input, int64_t row_unit, int64_t total_rows,
                            SparseBatches* batches) {
  const int sparse_block = candidates::sparse_block_of(input.block_size);
  const int per_row_blocks =
      static_cast<int>(input.blocks.shape[1]) * (input.block_size / sparse_block);
  const size_t topk_bytes = topk_per_row_workspace_bound(k);
  const int64_t pitch = slab_pitch(int64_t{per_row_blocks} * sparse_block);
  const bool prebuilt = input.sparse_rows.defined();
  const int64_t array_stride = candidates::pitch_floats(per_row_blocks);  // 256-byte rows
  const size_t per_row =
      (static_cast<size_t>(pitch) + (prebuilt ? 0 : 2 * array_stride + 1)) * sizeof(int32_t);
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
  const uintptr_t after_topk = align_slab(reinterpret_cast<uintptr_t>(base) + topk_bytes);
  if (prebuilt) {
    // Only the slab: the rows' arrays are the step's (rows_that_fit counted no others).
    batches->arrays =
        candidates::sparse_rows_in(input.sparse_rows.data, total_rows, per_row_blocks);
    batches->prebuilt = true;
    batches->logits = reinterpret_cast<float*>(after_topk);
  } else {
    const size_t array_bytes = static_cast<size_t>(rows * array_stride) * sizeof(int32_t);
    const uintptr_t entries = align_slab(after_topk + array_bytes);
    const uintptr_t end = align_slab(entries + array_bytes);
    batches->arrays = {reinterpret_cast<int32_t*>(after_topk), reinterpret_cast<int32_t*>(entries),
                       reinterpret_cast<int32_t*>(end), array_stride, per_row_blocks};
    batches->logits = reinterpret_cast<float*>(align_slab(end + rows * sizeof(int32_t)));
  }
  batches->pitch = pitch;
  batches->rows = rows;
  batches->sparse_block = sparse_block;
  batches->topk_run = options;
  batches->topk_run.workspace = base;
  batches->topk_run.workspace_bytes = topk_bytes;
  return Status::Ok();
}

// The indexer's own visibility of decode rows: [B, next_n] lengths read flat, or the causal
// 1-D form.
candidates::BoundRows decode_bounds(const TensorView& context_lens, int next_n) {
  candidates::BoundRows bounds = candidates::bound_rows_of(CandidateRows::decode(context_lens));
  if (context_lens.rank == 1 && next_n > 1) bounds.causal_next_n = next_n;
  return bounds;
}

// The batch's rows metadata from row `first` on: built into the batch's arrays, or the step's.
Status rows_metadata(const SparseBatches& batches, const CandidateInput& input, int64_t first,
                     int64_t count, const candidates::BoundRows& bounds, int64_t width,
                     const candidates::SparseSource& source, cudaStream_t stream,
                     candidates::SparseRows* arrays) {
  if (batches.prebuilt) {
    *arrays = candidates::rows_from(batches.arrays, first);
    return Status::Ok();
  }
  *arrays = batches.arrays;
  return candidates::build_sparse_rows(batches.arrays, candidates::candidate_rows_of(input, first),
                                       bounds, count, width, batches.sparse_block, source, stream);
}

// Scores the batch's rows (their metadata `arrays`), selects over each row's valid columns and
// remaps the selection to positions, into `out` (the batch's rows of the output); with `scores`
// defined, the selected keys' scores too, read from the sparse logits before the remap.
Status score_and_select(const char* op, const SparseBatches& batches,
                        const candidates::SparseRows& arrays, cuda::SparseScoring scoring,
                        int64_t count, const TensorView& out, const TensorView& scores, int k,
                        bool sorted) {
  const int64_t width = int64_t{arrays.sparse_per_row} * batches.sparse_block;
  scoring.logits =
      TensorView::contiguous(batches.logits, DType::kF32, {count, width}, Device::kCUDA)
          .with_row_stride(batches.pitch);
  scoring.entries = arrays.entries;
  scoring.entry_stride = arrays.stride;
  scoring.entries_per_row = arrays.sparse_per_row;
  scoring.end = arrays.end;
  scoring.sparse_block = batches.sparse_block;
  if (Status status =
          launch_sparse_scoring(op, scoring, /*clean=*/false, batches.topk_run.cuda_stream);
      !status.ok()) {
    return status;
  }
  const TensorView end = TensorView::contiguous(arrays.end, DType::kI32, {count}, Device::kCUDA);
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
  const TensorView blocks = TensorView::contiguous(arrays.blocks, DType::kI32,
                                                   {count, arrays.sparse_per_row}, Device::kCUDA)
                                .with_row_stride(arrays.stride);
  TensorView selected = out;
  selected.shape[1] = k;
  return sparse_topk_remap(selected, selected, blocks, CandidateRows{}, batches.sparse_block,
                           batches.topk_run.cuda_stream);
}

}  // namespace

bool sparse_consumer_takes(const CandidateInput& input, const QuantizedTensor& q, IndexerPath path,
                           int64_t width, int64_t auto_spans) {
  if (input.vllm_compatible || candidates::sparse_block_of(input.block_size) == 0) return false;
  if (path == IndexerPath::kSparse) return true;
  const int64_t span = input.blocks.shape[1] * static_cast<int64_t>(input.block_size);
  return path == IndexerPath::kAuto && width >= auto_spans * span;
}

size_t sparse_consumer_rows_size(int64_t rows, int num_candidates, int block_size) {
  const int sparse_block = candidates::sparse_block_of(block_size);
  if (sparse_block == 0) return 0;
  return candidates::sparse_rows_bytes(rows, num_candidates * (block_size / sparse_block));
}

Status build_sparse_consumer_rows_prefill(const TensorView& sparse_rows,
                                          const CandidateInput& input, const TensorView& ks,
                                          const TensorView& ke, int64_t num_keys, void* stream) {
  const int64_t rows = input.blocks.shape[0];
  const int sparse_block = candidates::sparse_block_of(input.block_size);
  const int per_row = static_cast<int>(input.blocks.shape[1]) * (input.block_size / sparse_block);
  return candidates::build_sparse_rows(candidates::sparse_rows_in(sparse_rows.data, rows, per_row),
                                       candidates::candidate_rows_of(input, 0),
                                       candidates::bound_rows_of(CandidateRows::prefill(ks, ke)),
                                       rows, num_keys, sparse_block, candidates::SparseSource{},
                                       static_cast<cudaStream_t>(stream));
}

Status build_sparse_consumer_rows_decode(const TensorView& sparse_rows, const CandidateInput& input,
                                         const TensorView& context_lens,
                                         const TensorView& block_table, int next_n,
                                         const PagedKCache& cache, void* stream) {
  const int64_t rows = input.blocks.shape[0];
  const int sparse_block = candidates::sparse_block_of(input.block_size);
  const int per_row = static_cast<int>(input.blocks.shape[1]) * (input.block_size / sparse_block);
  return candidates::build_sparse_rows(
      candidates::sparse_rows_in(sparse_rows.data, rows, per_row),
      candidates::candidate_rows_of(input, 0), decode_bounds(context_lens, next_n), rows,
      block_table.shape[1] * cache.page_size, sparse_block,
      candidates::paged_source(block_table, cache, next_n), static_cast<cudaStream_t>(stream));
}

Status sparse_candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                                        const QuantizedTensor& keys, const TensorView& weights,
                                        const TensorView& ks, const TensorView& ke, int k,
                                        bool sorted, const CandidateInput& input,
                                        const RunOptions& options, const TensorView& scores) {
  const char* op = "indexer_prefill";
  const int64_t rows = q.values.shape[0];
  SparseBatches batches;
  // MXFP4: the keys and each batch's queries as e4m3 at the workspace's end when they fit beside
  // a batch (the FP8 kernel then scores them: H200, H32 4096 rows x 16384 candidates of 131072
  // keys, docs/history/mxfp4-scoring.md); else the consumers convert in registers.
  ConvertedOperands converted;
  if (Status status = carve_prefill_batches(
          options, q, keys.values.shape[0], 1,
          [&](const RunOptions& from, SparseBatches* carved) {
            return carve_sparse_batches(op, from, k, input, 1, rows, carved);
          },
          &batches, &converted);
      !status.ok()) {
    return status;
  }
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  PreconvertedOperands operands;
  for (int64_t first = 0; first < rows; first += batches.rows) {
    const int64_t count = std::min(batches.rows, rows - first);
    const TensorView batch_ks = leading_rows(ks, first, count);
    const TensorView batch_ke = leading_rows(ke, first, count);
    candidates::SparseRows arrays;
    if (Status status =
            rows_metadata(batches, input, first, count,
                          candidates::bound_rows_of(CandidateRows::prefill(batch_ks, batch_ke)),
                          keys.values.shape[0], candidates::SparseSource{}, stream, &arrays);
        !status.ok()) {
      return status;
    }
    SparseScoring scoring;
    scoring.q = leading_rows(q.values, first, count);
    if (q.scales.defined()) scoring.q_scales = leading_rows(q.scales, first, count);
    scoring.weights = leading_rows(weights, first, count);
    scoring.keys = &keys;
    if (converted.workspace != nullptr) {
      // The logits view only shapes the raw call's plan; it is never written.
      const TensorView unused = TensorView::contiguous(
          batches.logits, DType::kF32, {count, keys.values.shape[0]}, Device::kCUDA);
      if (Status status = preconvert_mxfp4_rows(op, unused, {scoring.q, scoring.q_scales}, keys,
                                                scoring.weights, batch_ks, batch_ke,
                                                converted.workspace, converted.bytes,
                                                &converted.keys_ready, nullptr, stream, &operands);
          !status.ok()) {
        return status;
      }
      scoring.converted = &operands;
    }
    if (Status status =
            score_and_select(op, batches, arrays, scoring, count, leading_rows(out, first, count),
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
  if (Status status =
          carve_sparse_batches(op, options, k, input, next_n, batch_size * next_n, &batches);
      !status.ok()) {
    return status;
  }
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  const int64_t requests_per_batch = batches.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const int64_t batch_rows = count * next_n;
    const TensorView batch_table = leading_rows(block_table, first, count);
    candidates::SparseRows arrays;
    if (Status status =
            rows_metadata(batches, input, first * next_n, batch_rows,
                          decode_bounds(leading_rows(context_lens, first, count), next_n), width,
                          candidates::paged_source(batch_table, cache, next_n), stream, &arrays);
        !status.ok()) {
      return status;
    }
    SparseScoring scoring;
    scoring.q = decode_query_rows(q.values, first, count);
    if (q.scales.defined()) scoring.q_scales = decode_query_rows(q.scales, first, count);
    scoring.weights = leading_rows(weights, first * next_n, batch_rows);
    scoring.cache = &cache;
    scoring.next_n = next_n;
    if (Status status = score_and_select(
            op, batches, arrays, scoring, batch_rows, leading_rows(out, first * next_n, batch_rows),
            leading_rows(scores, first * next_n, batch_rows), k, sorted);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
