// SPDX-License-Identifier: Apache-2.0
// The indexer: scoring and selection in one call, without the [rows, keys] logits in memory.
//
// indexer_prefill == topk_per_row(mqa_logits(...)) and indexer_decode ==
// topk_per_row(paged_mqa_logits(...)) exactly, bit for bit (best first when sorted, ascending
// index order when not), on every backend: the scores are computed with the arithmetic of the
// backend's logits op.
//
// CUDA tensors (FP8, H 32/64, D 128, as the CUDA logits ops): the rows run in batches whose
// logits live in RunOptions::workspace, which is required (indexer_cuda_workspace_size(k) bytes
// is the recommended size; any size holding the top-k scratch plus one batch of rows works, and
// a larger one means fewer batches). The memory is therefore fixed, whatever the rows and keys;
// the call is asynchronous on the stream, never synchronizes and can be captured in a graph.
// MXFP4 indexer_prefill (and its dense consumer form) also takes, from the end of the workspace,
// room for its keys and one batch's queries converted to e4m3 (mqa_logits_cuda_workspace_size of
// the batch's rows, H and the keys) when a batch then still holds 4 rows (H = 64) or 8 (H = 32),
// or all of them: its batches are then scored as mqa_logits with a workspace is, by the FP8
// kernel, with the same bits; otherwise the scoring kernel converts on chip. Its fused path and
// the sparse consumer path do the same (the fused path takes the dense one when they do not fit;
// the sparse one converts in its kernel's registers). Both indexer paths take MXFP4 and give the
// same answer; on the fused one, a row that meets a vector whose block scales span more binades
// than e4m3 holds is selected by its dense fallback. An MXFP4 source layer (candidate_source)
// takes the dense path.
#pragma once

#include "flashindexer/candidates.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer {

// Which implementation of the CUDA indexer runs, and what the caller knows of its rows.
//
// The dense path (a logits slab + top-k, in row batches) and the fused path (no logits written)
// return the same answer bit for bit. kAuto takes the dense path but for prefill calls whose rows
// are known to be long (min_row_keys; cuda_prefill_path tells which path a call takes): the fused
// path is level or ahead on rows of 17K-45K keys and more (by k and by how many requests the
// chunk packs) and mostly behind on shorter rows, and a call's shape gives its chunk's packed
// keys, not what a row sees (docs/decisions/prefill-path-thresholds.md). At decode kAuto is always
// the dense path. The fused path takes rows of at most 2^29 keys (kInvalidArgument beyond). Both
// fields are ignored on the CPU.
struct IndexerOptions {
  IndexerPath path = IndexerPath::kAuto;
  // indexer_prefill on CUDA with kAuto: the fewest keys any row of the call sees (ke - ks), when
  // the caller knows it (a serving engine knows its requests' context lengths); 0 = unknown. It
  // only picks the path (a wrong value costs time, never the answer); must be >= 0.
  int64_t min_row_keys = 0;
  // A DeepSeek-V4.1 consumer layer (candidates.h): when candidates.blocks is defined ([rows, C]
  // i32, one row per query row), the call selects only inside the named blocks of
  // candidates.block_size positions, exactly candidate_topk_per_row over the call's logits with
  // the call's own row ranges as bounds (logits width: keys.shape[0] for prefill,
  // block_table.shape[1] * page_size for decode). On CUDA there are two paths, with the same
  // answer bit for bit. kDense: the logits slab of the whole context, then the consumer's
  // selection. kSparse (the exact form, a block size of 8, 16 or 32): only the candidate blocks'
  // keys are scored, C x cb columns a row in the workspace, then the top-k over them and the
  // remap to positions. kAuto takes kSparse for the exact form with such a block size once the
  // logits width is at least 4 (prefill) or 2 (decode) times C x cb, where it was measured
  // faster on an H200 (docs/benchmarks.md), else kDense. kFused is refused. FP8 and MXFP4 alike.
  // Either way the workspace is the dense indexer's (a batch is the rows that fit).
  CandidateInput candidates = {};
  // Optional output, [rows, >= k] f32: scores[t, i] is the score of the key out[t, i] names, the
  // very bits the backend's logits op writes at that column (mqa_logits column ks[t] + out[t, i];
  // paged_mqa_logits column out[t, i], the position), and -inf where out[t, i] is -1. Columns k
  // and beyond are not touched. Every path writes them (CPU, CUDA dense and fused, a consumer
  // call's exact form; a consumer call with candidates.vllm_compatible is refused, kUnsupported,
  // since its selection ranks masked scores). What dcp_pack_candidates_from_scores packs, so DCP
  // runs after the fused path too. One corner of the CUDA fused path: it keeps the scores of its
  // candidates as order keys, in which -0.0 equals +0.0 and every NaN is one value, so it writes
  // +0.0 for a -0.0 score and 0x7fffffff (the GPU's canonical NaN) for a NaN one. A -0.0 score
  // needs a key scale <= 0, which the quantizers never write; a NaN one a NaN code or scale, or
  // head sums that overflow (+inf + -inf).
  TensorView scores = {};
  // A DeepSeek-V4.1 source layer (candidates.h): when candidate_source.blocks is defined, the call
  // also writes select_candidate_blocks(logits, bounds, C, cb) of its dense logits, bit for bit,
  // with the call's own row bounds (prefill: ks / ke, logits width keys.shape[0]; decode: each of
  // the B * next_n rows sees [0, its decode length), row_repeat 1, width block_table.shape[1] *
  // page_size), while `out` stays the unrestricted top-k. On CUDA both paths publish them with
  // the same bits: the dense path from each row batch's logits slab, the fused path (block sizes
  // that are multiples of 8; kFused with another is refused, kUnsupported) from its scan, which
  // folds every score into its block's maximum without writing the logits. kAuto picks the path
  // as for a call without the output (cuda_prefill_path; decode: the dense path), and the dense
  // one for a block size the fused path does not take. The block scores of each row batch live in
  // the workspace (indexer_cuda_workspace_size(k, options) is the recommended size). A call that is
  // both consumer and source (candidates and candidate_source defined) is refused (kUnsupported):
  // V4.1 has no such layer.
  CandidateOutput candidate_source = {};
};

// out: [M, >= k] i32 (out); the other arguments as mqa_logits.
Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options = {},
                       const IndexerOptions& indexer_options = {}, const RunOptions& options = {});

// out: [B * next_n, >= k] i32 (out); the other arguments as paged_mqa_logits.
Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options = {},
                      const IndexerOptions& indexer_options = {}, const RunOptions& options = {});

// Deprecated, kept for one release: the same calls with the indexer's options read from
// RunOptions::indexer_path and RunOptions::min_row_keys. Pass IndexerOptions instead.
Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options, const RunOptions& options);
Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options,
                      const RunOptions& options);

// Bytes of caller workspace (RunOptions::workspace) indexer_prefill / indexer_decode use on the
// CPU at `k` with `threads` CPU threads (0 = the OpenMP default); independent of rows and keys.
size_t indexer_cpu_workspace_size(int k, int threads = 0);

// The path indexer_prefill takes on CUDA tensors with these options at `k`, over a chunk of
// `num_keys` packed keys (keys.shape[0]; 0: unknown, taken as one request):
// indexer_options.path unless it is kAuto; under kAuto the fused path when k is at most 2048 and
// the rows are known to be long enough (min_row_keys at least a threshold measured per k, lower
// in a chunk that packs several requests), else the dense path; with a candidate output whose
// block size is not a multiple of 8, the dense path. indexer_decode's kAuto is always kDense.
IndexerPath cuda_prefill_path(int k, const IndexerOptions& indexer_options, int64_t num_keys = 0);
// Deprecated, kept for one release: the same query on RunOptions::indexer_path / min_row_keys.
IndexerPath cuda_prefill_path(int k, const RunOptions& options, int64_t num_keys = 0);

// Recommended bytes of RunOptions::workspace for indexer_prefill / indexer_decode on CUDA tensors
// at `k` on the current device: the top-k scratch plus a 256 MiB logits slab (512 rows of 128K
// keys per batch). Independent of rows and keys; 0 in a build without CUDA.
size_t indexer_cuda_workspace_size(int k);
// The same for a call with these options. A candidate output adds the top-k scratch of C blocks
// (when it is larger than k's) and, beside the 256 MiB slab, the block scores of its rows
// (ceil(width / cb) floats a row, rounded up to 256 bytes: 1/cb of the slab plus at most 65 MiB
// of rounding), so that the batches stay as large as without it. Any workspace holding the
// scratch and one row unit of both works, in smaller batches.
size_t indexer_cuda_workspace_size(int k, const IndexerOptions& indexer_options);

}  // namespace flashindexer
