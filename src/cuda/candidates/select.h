// SPDX-License-Identifier: Apache-2.0
// select_candidate_blocks over scratch the caller has already carved (select.cu): shared by the
// public op and the indexer's candidate output, which runs it on each row batch's logits slab.
// Host code of the CUDA backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/candidates/consumer.h"
#include "cuda/candidates/rows.cuh"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::candidates {

// The block scores of `rows` rows and their block counts, and the top-C's stream and scratch
// (topk_per_row_workspace_size(rows, ceil(width / cb), C) bytes or more).
struct BlockSelectScratch {
  float* scores = nullptr;  // [rows, pitch]
  int64_t pitch = 0;
  int32_t* row_blocks = nullptr;  // [rows]
  RunOptions topk_run;
};

// Bytes of the two arrays for `rows` rows of logits `width` wide (each 256-byte aligned).
size_t block_select_array_bytes(int64_t rows, int64_t width, int block_size);
// Lays them from `base` on (256-byte aligned, block_select_array_bytes long); topk_run unset.
BlockSelectScratch carve_block_select(void* base, int64_t rows, int64_t width, int block_size);

// out [logits.rows, >= C] i32 (row stride out_stride): the candidate blocks of each logits row
// under `bounds` (select_candidate_blocks' contract, candidates.h).
Status select_blocks(const char* op, int32_t* out, int64_t out_stride, const LogitsRows& logits,
                     const BoundRows& bounds, int num_blocks, int block_size,
                     const BlockSelectScratch& scratch);
// Its second half, from block scores already in scratch (rows `count`, `blocks` wide: the
// widest row's block count, row lengths in scratch.row_blocks): the top-C, best first, then -1
// for the -inf blocks. The fused source (sm90_fused/block_scores.h) computes the scores in its
// scan.
Status select_top_blocks(const char* op, int32_t* out, int64_t out_stride, int64_t count,
                         int64_t blocks, int num_blocks, const BlockSelectScratch& scratch);

}  // namespace flashindexer::cuda::candidates
