// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of the candidate ops (flashindexer/candidates.h) and of the indexer's consumer
// form (IndexerOptions::candidates). Arguments arrive validated by src/api; a build without CUDA
// answers kUnsupported from src/cuda/stub.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashindexer/candidates.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

Status select_candidate_blocks(const TensorView& out, const TensorView& logits,
                               const CandidateRows& rows, int num_blocks, int block_size,
                               const RunOptions& options);
size_t select_candidate_blocks_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                              int block_size);

Status apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                            const TensorView& candidates, int block_size, void* stream);

Status candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                              const CandidateRows& rows, const TensorView& candidates,
                              int block_size, int k, bool sorted, bool vllm_compatible,
                              const RunOptions& options);
size_t candidate_topk_per_row_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                             int block_size, int k);

Status candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                          const TensorView& candidates, const CandidateRows& rows,
                                          int block_size, int sparse_block, void* stream);
Status sparse_topk_remap(const TensorView& out, const TensorView& columns,
                         const TensorView& sparse_indices, const CandidateRows& rows,
                         int sparse_block, void* stream);

// The public sparse logits ops (flashindexer/candidates.h): the entries of every row's sparse
// blocks (sparse_logits.cu) into options.workspace, then the sparse scoring kernel.
Status sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                         const QuantizedTensor& keys, const TensorView& weights,
                         const TensorView& sparse_indices, const TensorView& end,
                         const TensorView& ks, int sparse_block, bool clean,
                         const RunOptions& options);
Status paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                               const PagedKCache& cache, const TensorView& weights,
                               const TensorView& sparse_indices, const TensorView& end,
                               const TensorView& block_table, int sparse_block, bool clean,
                               const RunOptions& options);
size_t sparse_logits_workspace_size(int64_t rows, int64_t sparse_blocks);

// The consumer indexer, in row batches over options.workspace (indexer_workspace_size(k) bytes or
// more): the sparse path (sparse_indexer.cu) when sparse_consumer_takes, else the dense one:
// mqa_logits (paged_mqa_logits) into a slab, then the consumer's selection. The fused path is
// never taken for a consumer call. scores (optional, exact form only): the selected keys' scores
// gathered from each batch's slab (IndexerOptions::scores).
Status candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                                 const QuantizedTensor& keys, const TensorView& weights,
                                 const TensorView& ks, const TensorView& ke, int k, bool sorted,
                                 const CandidateInput& candidates, IndexerPath path,
                                 const RunOptions& options, const TensorView& scores = {});
Status candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                                const PagedKCache& cache, const TensorView& weights,
                                const TensorView& context_lens, const TensorView& block_table,
                                int k, bool sorted, const CandidateInput& candidates,
                                IndexerPath path, const RunOptions& options,
                                const TensorView& scores = {});

// Whether a consumer call takes the sparse path (FP8 or MXFP4 operands): the exact selection (not
// vLLM's dense mask), a candidate block size of 8, 16 or 32 (sparse blocks of 8 or 16 keys;
// src/api refuses kSparse otherwise), and IndexerPath::kSparse asked for, or kAuto with a logits
// width of at least auto_spans times the candidates' span (C x cb positions).
bool sparse_consumer_takes(const CandidateInput& candidates, const QuantizedTensor& q,
                           IndexerPath path, int64_t width, int64_t auto_spans);
// kAuto's crossovers, H32 C 2048 cb 8 k 512 on an H200 (python -m bench candidates): the sparse
// path scores C x cb columns a row with one query row per work item, where the dense prefill
// kernels share each key tile among an item's rows, so prefill needs the longer context. Sparse
// over dense at 1, 2, 4, 8 spans: prefill 0.59, 0.71, 1.09, 1.88; decode 0.98, 1.39, -, 3.76.
constexpr int64_t kSparseAutoSpansPrefill = 4;
constexpr int64_t kSparseAutoSpansDecode = 2;
// The step's sparse consumer rows (flashindexer/candidates.h: build_sparse_consumer_rows_*),
// into `sparse_rows`'s buffer; arguments checked by src/api.
size_t sparse_consumer_rows_size(int64_t rows, int num_candidates, int block_size);
Status build_sparse_consumer_rows_prefill(const TensorView& sparse_rows,
                                          const CandidateInput& candidates, const TensorView& ks,
                                          const TensorView& ke, int64_t num_keys, void* stream);
Status build_sparse_consumer_rows_decode(const TensorView& sparse_rows,
                                         const CandidateInput& candidates,
                                         const TensorView& context_lens,
                                         const TensorView& block_table, int next_n,
                                         const PagedKCache& cache, void* stream);
Status sparse_candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                                        const QuantizedTensor& keys, const TensorView& weights,
                                        const TensorView& ks, const TensorView& ke, int k,
                                        bool sorted, const CandidateInput& candidates,
                                        const RunOptions& options, const TensorView& scores);
Status sparse_candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                                       const PagedKCache& cache, const TensorView& weights,
                                       const TensorView& context_lens,
                                       const TensorView& block_table, int k, bool sorted,
                                       const CandidateInput& candidates, const RunOptions& options,
                                       const TensorView& scores);

}  // namespace flashindexer::cuda
