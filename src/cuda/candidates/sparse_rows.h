// SPDX-License-Identifier: Apache-2.0
// The rows metadata of the sparse consumer (the candidate ops' CUDA backend): from each row's
// candidate blocks, its sorted distinct sparse blocks, their entries for the sparse scoring
// kernel (format_sparse.cuh) and its count of valid sparse columns. Host code.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/candidates/consumer.h"
#include "cuda/candidates/rows.cuh"
#include "flashindexer/kcache.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::candidates {

// Where the sparse blocks' keys lie: the packed workspace (row key = ks + position), or the paged
// cache through the block table (request = row / rows_per_request).
struct SparseSource {
  const int32_t* block_table = nullptr;  // null: the packed workspace
  int64_t table_stride_b = 0;
  int64_t table_stride_p = 0;
  int64_t table_pages = 0;
  int64_t num_pages = 0;  // pages of the cache
  int page_size = 64;     // a power of two, at most 128
  int rows_per_request = 1;
};

// The paged source of `rows_per_request` query rows a request over block_table [B, P] i32.
inline SparseSource paged_source(const TensorView& block_table, const PagedKCache& cache,
                                 int rows_per_request) {
  SparseSource source;
  source.block_table = block_table.ptr<const int32_t>();
  source.table_stride_b = block_table.stride[0];
  source.table_stride_p = block_table.stride[1];
  source.table_pages = block_table.shape[1];
  source.num_pages = cache.num_pages;
  source.page_size = cache.page_size;
  source.rows_per_request = rows_per_request;
  return source;
}

// The per-row arrays, [rows, sparse_per_row] i32 (row stride `stride`) and [rows] i32.
struct SparseRows {
  int32_t* blocks = nullptr;   // ascending distinct sparse block ids (position / sparse_block)
  int32_t* entries = nullptr;  // their entries (format_sparse.cuh); past the kept, the last
  int32_t* end = nullptr;      // valid sparse columns
  int64_t stride = 0;
  int sparse_per_row = 0;  // C x ratio
};

// For each row t: candidate c names sparse blocks c * ratio .. c * ratio + ratio - 1 (ratio =
// block_size / sparse_block); those inside the row's visible positions [0, n) (n from `bounds`
// over a logits `width` wide) are kept once each, ascending; end[t] counts their visible
// positions. The exact consumer's selection among them is then the top-k of the sparse logits
// over [0, end), remapped to positions through `blocks`.
Status build_sparse_rows(const SparseRows& out, const CandidateRowsOnDevice& candidates,
                         const BoundRows& bounds, int64_t rows, int64_t width, int sparse_block,
                         const SparseSource& source, cudaStream_t stream);

// A step's rows metadata in one buffer (CandidateInput::sparse_rows): blocks [rows, stride],
// entries [rows, stride], then end [rows], each region 256-byte aligned from the aligned base.
size_t sparse_rows_bytes(int64_t rows, int sparse_per_row);
SparseRows sparse_rows_in(void* base, int64_t rows, int sparse_per_row);
// The rows of `all` from row `first` on.
inline SparseRows rows_from(const SparseRows& all, int64_t first) {
  SparseRows rows = all;
  rows.blocks += first * all.stride;
  rows.entries += first * all.stride;
  rows.end += first;
  return rows;
}

// The sparse block of a candidate block size (16 when it divides cb, else 8), 0 when cb is no
// 8 or 16 multiple of ratio 1 or 2 (cb of 8, 16 or 32).
inline int sparse_block_of(int block_size) {
  if (block_size == 16 || block_size == 32) return 16;
  if (block_size == 8) return 8;
  return 0;
}

}  // namespace flashindexer::cuda::candidates
