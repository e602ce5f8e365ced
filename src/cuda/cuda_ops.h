// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's entry points. Arguments arrive validated by src/api; `stream` is a
// cudaStream_t. Every op is asynchronous on its stream and graph-capturable.
#pragma once

#include "flashindexer/indexer.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/query.h"
#include "flashindexer/rope.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda {

// out [N, D] f32 = e4m3(values [N, D]) * scales [N] f32.
Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream);

// The quantizers of flashindexer/quantize.h on CUDA tensors, bit for bit the CPU's. The
// quantizers take rows of 32, 64, 128 or 256 values (kUnsupported otherwise).
Status quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                      void* stream);
Status quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                      void* stream);
Status dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream);

// The page-cache ops of flashindexer/kcache.h on CUDA tensors, bit for bit the CPU's on valid
// input. Device-side values are not checked on the host: insert skips slots past the cache,
// gather skips keys whose offsets or pages are out of range (see src/cuda/kcache/).
Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const RopeOptions& rope, void* stream);
Status gather_k_workspace(const TensorView& values, const TensorView& scales,
                          const PagedKCache& cache, const TensorView& block_table,
                          const TensorView& cu_seq_lens, void* stream);

// The query quantizers of flashindexer/query.h on CUDA tensors; quant.weight_scale is resolved
// (nonzero). D 64 or 128.
Status quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                          const TensorView& q, const TensorView& weights,
                          const QueryQuantOptions& quant, void* stream);
Status quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                            const TensorView& weights_out, const TensorView& q,
                            const TensorView& weights, const QueryQuantOptions& quant,
                            void* stream);

// mqa_logits / paged_mqa_logits on CUDA tensors (see flashindexer/logits.h): FP8 and MXFP4, H 32
// or 64, D 128, next_n 1..4, page size 32/64/128. Checks what TMA needs (alignment, strides) and
// returns kUnsupported for other head dims. An MXFP4 mqa_logits call given a workspace converts
// its operands there and scores them with the FP8 kernel (mqa_logits_workspace_size bytes).
// `keys_ready` lets the row batches of one indexer call over the same keys convert them once:
// when it points to true, the workspace already holds these keys converted and only the queries
// are; a call that converts the keys sets it (a call with nothing to score converts nothing).
Status mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                  const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean,
                  void* stream, void* workspace = nullptr, size_t workspace_bytes = 0,
                  bool* keys_ready = nullptr);
size_t mqa_logits_workspace_size(int64_t rows, int heads, int64_t num_keys);
Status paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                        const PagedKCache& cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, bool clean,
                        void* stream);

// topk_per_row on CUDA tensors (see flashindexer/topk.h); arguments validated by src/api.
// Rows are split across CTAs when they are too few to fill the GPU; that needs
// topk_per_row_workspace_size(rows, width, k) bytes of options.workspace (0 otherwise).
Status topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                    bool sorted, const RunOptions& options);
size_t topk_per_row_workspace_size(int64_t rows, int64_t width, int k);
// The most topk_per_row_workspace_size returns at this k for any rows and width.
size_t topk_per_row_workspace_bound(int k);

// The optional outputs of an indexer call (IndexerOptions::scores and ::candidate_source),
// validated by src/api; undefined views: not asked for.
struct IndexerOutputs {
  TensorView scores;
  CandidateOutput candidate_source;
};

// indexer_prefill / indexer_decode on CUDA tensors (see flashindexer/indexer.h), exactly
// topk_per_row(mqa_logits(...)) / topk_per_row(paged_mqa_logits(...)) by the path asked for
// (kAuto: dense; the caller resolves the prefill choice, cuda_prefill_path): the rows run in
// batches whose logits fit in options.workspace (indexer_workspace_size(k) bytes or more; a larger
// workspace means fewer, larger batches), so memory does not grow with rows or keys.
// options.indexer_path and options.min_row_keys are not read. An MXFP4 call with a candidate
// output takes the dense path (indexer.cu).
Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       bool sorted, IndexerPath path, const IndexerOutputs& outputs,
                       const RunOptions& options);
Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, bool sorted, IndexerPath path,
                      const IndexerOutputs& outputs, const RunOptions& options);
size_t indexer_workspace_size(int k);
// With a candidate output of C blocks of block_size positions (num_blocks 0: none).
size_t indexer_workspace_size(int k, int num_blocks, int block_size);

}  // namespace flashindexer::cuda
