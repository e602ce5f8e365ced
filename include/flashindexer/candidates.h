// SPDX-License-Identifier: Apache-2.0
// DeepSeek-V4.1 two-level selection: candidate blocks (spec §8).
//
// A candidate *source* layer publishes, per query row, the C blocks of cb request-local
// positions with the largest block scores (select_candidate_blocks); *consumer* layers then
// select their own top-k only inside those blocks, on dense logits (candidate_topk_per_row, or
// indexer_prefill / indexer_decode with IndexerOptions::candidates) or on sparse logits of the
// candidate keys alone (candidate_blocks_to_sparse_indices, then sparse_topk_remap).
//
// Row bounds are vLLM's: logits row t reads bound row t / row_repeat, start ks (0 when ks is
// absent: the decode form) and end ke; the row's visible columns are [ks, min(ke, width)).
// Block b of a row is its positions [b * cb, (b + 1) * cb), position p being column ks + p.
//
// Block order (one total order, the same on every backend, so every path publishes the same
// blocks): block score descending, where the score is the max of the block's visible logits
// (NaN propagates through the max; a block with no visible column scores -inf), NaN ranks equal
// to +inf, the newest visible block (the one holding column min(ke, width) - 1) scores +inf, and
// equal scores rank the smaller block id first. The pinned block can therefore be displaced only
// when C other blocks of the row score +inf or NaN.
#pragma once

#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

// The most candidate blocks per row (C) any candidate op takes.
inline constexpr int kMaxCandidateBlocks = 4096;

// Bounds of the rows of the candidate ops (vLLM's row_ks / row_ke / row_repeat).
struct CandidateRows {
  TensorView ks;       // [R] i32, or undefined: every row starts at column 0 (decode)
  TensorView ke;       // [R] i32, or [B, n] i32 read flat (R = B * n)
  int row_repeat = 1;  // >= 1; the op's rows are R * row_repeat

  static CandidateRows prefill(const TensorView& ks, const TensorView& ke, int row_repeat = 1) {
    CandidateRows r;
    r.ks = ks;
    r.ke = ke;
    r.row_repeat = row_repeat;
    return r;
  }
  static CandidateRows decode(const TensorView& lengths, int row_repeat = 1) {
    CandidateRows r;
    r.ke = lengths;
    r.row_repeat = row_repeat;
    return r;
  }
};

// out: [rows, >= C] i32 (out); logits: [rows, width] f32 (row stride >= width); 1 <= C <= 4096,
// cb >= 1. out[t, i] is the block id of row t's i-th best block (best first) for i < min(C,
// ceil(width / cb)), or -1 where that block scores -inf or i is past that count; a zero-width
// logits gives all -1. Columns C and beyond of out are not touched. CPU: 0 <= ks <= ke is checked.
//
// CUDA tensors: options.workspace must hold select_candidate_blocks_cuda_workspace_size() bytes
// (16-byte aligned): the block scores and the top-C scratch. Asynchronous, graph-capturable,
// bit-identical to the CPU; bounds are not checked (ks < 0 reads as 0, ke < ks as ks).
Status select_candidate_blocks(const TensorView& out, const TensorView& logits,
                               const CandidateRows& rows, int num_blocks, int block_size,
                               const RunOptions& options = {});
size_t select_candidate_blocks_cuda_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                                   int block_size);

// vLLM's mask (spec §8.4), in place on logits [rows, width] f32: every column is set to -inf
// unless ks <= col < ke and either its block (col - ks) / cb is named by an entry of
// candidates [rows, C] i32 (entries < 0 name nothing), or col == width - 1 and some entry c >= 0
// has its start column ks + c * cb >= width (vLLM's "edge" flag). Any entry value is accepted.
Status apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                            const TensorView& candidates, int block_size,
                            const RunOptions& options = {});

struct CandidateTopKOptions {
  // Best first when true, else ascending index order (as TopKOptions::sorted).
  bool sorted = false;
  // false (exact): the top-k among the visible positions inside the named blocks, under the total
  // order of topk.h, -1 past them; duplicate, negative and out-of-row entries name nothing more.
  // true (vLLM's dense consumer): apply_candidate_mask, then topk_per_row over [ks, min(ke,
  // width)). It differs in two corners: a row whose blocks hold fewer than k positions above
  // -inf is filled with masked (-inf) positions from outside them, and the edge flag keeps the
  // row's last column. With this option the logits are masked in place.
  bool vllm_compatible = false;
};

// out: [rows, >= k] i32 (out); logits [rows, width] f32; candidates [rows, C] i32 (C <= 4096);
// 1 <= k <= 4096. The consumer's selection on dense logits. CUDA tensors: options.workspace must
// hold candidate_topk_per_row_cuda_workspace_size() bytes (16-byte aligned).
Status candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                              const CandidateRows& rows, const TensorView& candidates,
                              int block_size, int k, const CandidateTopKOptions& topk_options = {},
                              const RunOptions& options = {});
size_t candidate_topk_per_row_cuda_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                                  int block_size, int k);

// Sparse consumer metadata (spec §8.5), with the sparse block SBK (8 or 16) dividing cb and
// ratio = cb / SBK in {1, 2}; C a power of two. sparse_indices: [rows, C * ratio] i32 (out),
// end: [rows] i32 (out); candidates [rows, C] i32. Per row: each entry c becomes sparse blocks
// c * ratio .. c * ratio + ratio - 1; those b with 0 <= b < ceil(max(ke - ks, 0) / SBK) are kept
// and sorted ascending (duplicates kept); sparse_indices[t, i] = b_i + ks / SBK for the n kept,
// the rest repeat the last kept (ks / SBK when none); end[t] = (n - 1) * SBK + clamp(ke -
// (last * SBK + ks), 1, SBK), 0 when none. Sparse block i covers positions (sparse_indices[t, i]
// - ks / SBK) * SBK + [0, SBK), i.e. packed keys from sparse_indices[t, i] * SBK + ks % SBK.
Status candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                          const TensorView& candidates, const CandidateRows& rows,
                                          int block_size, int sparse_block,
                                          const RunOptions& options = {});

// out, columns: [rows, k] i32 (out may be columns); sparse_indices [rows, S] i32. Each column c
// with 0 <= c < S * SBK becomes the position (sparse_indices[t, c / SBK] - ks / SBK) * SBK +
// c % SBK; every other value becomes -1. Only rows.ks is read (rows.ke may be undefined).
Status sparse_topk_remap(const TensorView& out, const TensorView& columns,
                         const TensorView& sparse_indices, const CandidateRows& rows,
                         int sparse_block, const RunOptions& options = {});

// Sparse logits (spec §8.5, DeepGEMM's sparse MQA logits): the scores of the keys of each row's
// sparse blocks alone, in the columns of its sparse indices. Column j * SBK + o (o < SBK) of row
// t is the logit of
//   sparse_mqa_logits (prefill): packed key sparse_indices[t, j] * SBK + ks % SBK + o (ks of
//     rows, as candidate_blocks_to_sparse_indices took them; rows.ke is only checked);
//   paged_sparse_mqa_logits (decode): position sparse_indices[t, j] * SBK + o of request
//     t / next_n of the block table;
// for every column below end[t]. With logits_options.clean the columns from end[t] to S * SBK
// are -inf, else left untouched; columns past S * SBK are never written. Each score has the bits
// mqa_logits / paged_mqa_logits give that key on the same backend, so a consumer's selection over
// these logits equals its selection over the dense ones. The row of each q, weights row and
// output row is t (q [M, H, D] or [B, next_n, H, D], weights [rows, H], as the dense ops).
//   logits: [rows, >= S * SBK] f32 (out); sparse_indices: [rows, S] i32; end: [rows] i32 with
//   0 <= end <= S * SBK; SBK (sparse_block) 8 or 16.
// CPU (FP8 and MXFP4): every key a column below end names is checked to exist. CUDA (FP8 and
// MXFP4, H 32 or 64, D 128): options.workspace must hold sparse_logits_cuda_workspace_size(rows,
// S) bytes (16-byte aligned); the indices are not checked (that would need a host sync): a column
// whose key does not exist holds an unspecified value, and nothing outside the operands is read.
// Asynchronous, graph-capturable.
Status sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                         const QuantizedTensor& keys, const TensorView& weights,
                         const TensorView& sparse_indices, const TensorView& end,
                         const CandidateRows& rows, int sparse_block,
                         const LogitsOptions& logits_options = {}, const RunOptions& options = {});
Status paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                               const PagedKCache& cache, const TensorView& weights,
                               const TensorView& sparse_indices, const TensorView& end,
                               const TensorView& block_table, int sparse_block,
                               const LogitsOptions& logits_options = {},
                               const RunOptions& options = {});
size_t sparse_logits_cuda_workspace_size(int64_t rows, int64_t sparse_blocks);

// The candidate input of a consumer layer's indexer call (IndexerOptions::candidates).
struct CandidateInput {
  TensorView blocks;             // [rows, C] i32 (one row per query row); undefined: unrestricted
  int block_size = 0;            // cb
  bool vllm_compatible = false;  // as CandidateTopKOptions::vllm_compatible
  // Optional, CUDA only: the step's sparse consumer rows, built once by
  // build_sparse_consumer_rows_prefill / _decode from these blocks and the call's row bounds
  // (and block table); a call that takes the sparse path reads them instead of building them
  // (one on the dense path has no use for them).
  TensorView sparse_rows = {};
  bool defined() const { return blocks.defined(); }
};

// The rows metadata of a consumer step's sparse path on CUDA (IndexerPath::kSparse, or kAuto
// when it takes it): for each query row, its candidate blocks' sorted distinct sparse blocks,
// their keys' places and its count of valid columns. A sparse consumer call builds them for its
// rows unless CandidateInput::sparse_rows holds them: every consumer layer of a DeepSeek-V4.1
// step shares its candidates, row bounds and block table, so an engine builds them once a step
// (asynchronous, graph-capturable) and hands them to each layer's call. The layers' calls must
// then pass exactly the blocks, block size, bounds and block table they were built from (not
// checked: that would read the device). The CPU consumer takes none (kUnsupported).
//   sparse_rows: [>= sparse_consumer_rows_size(rows, C, block_size)] u8 on the GPU (out);
//   candidates: blocks [rows, C] i32, block_size 8, 16 or 32, the exact form (not
//   vllm_compatible); prefill: ks, ke [rows] i32 and num_keys (the chunk's keys.shape[0]);
//   decode: context_lens and block_table as indexer_decode takes them, rows = B * next_n, and
//   one of the step's caches (its page size and page count; the layers' caches share both).
size_t sparse_consumer_rows_size(int64_t rows, int num_candidates, int block_size);
Status build_sparse_consumer_rows_prefill(const TensorView& sparse_rows,
                                          const CandidateInput& candidates, const TensorView& ks,
                                          const TensorView& ke, int64_t num_keys,
                                          const RunOptions& options = {});
Status build_sparse_consumer_rows_decode(const TensorView& sparse_rows,
                                         const CandidateInput& candidates,
                                         const TensorView& context_lens,
                                         const TensorView& block_table, int next_n,
                                         const PagedKCache& cache, const RunOptions& options = {});

// The candidate output of a source layer's indexer call (IndexerOptions::candidate_source): the
// call returns its own unrestricted top-k and also writes exactly what select_candidate_blocks
// would write over the call's dense logits, with the call's own row ranges as bounds.
struct CandidateOutput {
  TensorView blocks;   // [rows, C] i32 (out), C = blocks.shape[1] (1..4096); undefined: none
  int block_size = 0;  // cb
  bool defined() const { return blocks.defined(); }
};

}  // namespace flashindexer
