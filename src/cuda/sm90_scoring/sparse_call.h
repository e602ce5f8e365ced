// SPDX-License-Identifier: Apache-2.0
// A sparse scoring call (format_sparse.cuh): the scoring kernel over each query row's own list of
// key blocks, writing its sparse logits. Host code of the CUDA backend; the candidate consumer's
// sparse path (cuda/candidates/sparse_indexer.cu) builds the entries and calls it.
#pragma once

#include <cstdint>

#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

struct PreconvertedOperands;  // call.h

// Row r of the call is query row r of q (e4m3 [rows, H, 128], or MXFP4 [rows, H, 64] packed with
// q_scales [rows, H, 4]; H 32 or 64, any row stride that TMA takes) with weights row r ([rows, H]
// f32); the keys are of q's format. Its sparse column j * sparse_block + o (o <
// sparse_block) is key o of block j, whose first key entries[r * entry_stride + j] names
// (format_sparse.cuh: a packed key row of `keys`, or page << 7 | row of `cache`; negative: none).
// Columns [0, end[r]) of logits row r receive the scores; with `clean`, the others -inf.
struct SparseScoring {
  TensorView logits;    // [rows, width] f32, width <= entries_per_row * sparse_block
  TensorView q;         // [rows, H, 128] e4m3 or [rows, H, 64] e2m1x2
  TensorView q_scales;  // MXFP4: [rows, H, 4] UE8M0 (undefined for FP8)
  TensorView weights;   // [rows, H] f32
  const QuantizedTensor* keys = nullptr;  // the packed source, or
  const PagedKCache* cache = nullptr;     // the paged one (page size 32, 64 or 128)
  const int32_t* entries = nullptr;
  int64_t entry_stride = 0;
  int64_t entries_per_row = 0;
  const int32_t* end = nullptr;  // [rows], contiguous
  int sparse_block = 8;          // 8 or 16
  // The paged MXFP4 form: the next_n of the decode call the rows stand for, which picks the
  // dense call's operand form (format_mxfp4_sparse.cuh).
  int next_n = 1;
  // The packed MXFP4 form, optionally: these rows' queries and weights and every key as e4m3
  // (preconvert_mxfp4_operands, call.h), which the FP8 kernel scores instead (the MXFP4 fix-up
  // follows): the converting format's bits, as the register form's, without the conversion in
  // the consumers (sparse_indexer.cu).
  const PreconvertedOperands* converted = nullptr;
};

Status launch_sparse_scoring(const char* op, const SparseScoring& call, bool clean, void* stream);

// What sparse scoring over the paged cache needs of q and the cache on CUDA: the paged kernels'
// checks, and pages that fit the entries (page << kSparseRowBits | row in 31 bits).
Status check_sparse_paged_source(const char* op, const QuantizedTensor& q,
                                 const PagedKCache& cache);

// Requests [first, first + count) of decode q values [B, next_n, H, D] (one-byte elements: e4m3,
// packed E2M1 or their UE8M0 scales; batch and next_n contiguous with each other) as query rows
// [count x next_n, H, D].
TensorView decode_query_rows(const TensorView& q, int64_t first, int64_t count);

}  // namespace flashindexer::cuda
