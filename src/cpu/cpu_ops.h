// SPDX-License-Identifier: Apache-2.0
// The CPU backend. Arguments arrive validated by src/api; these functions only compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashindexer/dist.h"
#include "flashindexer/indexer.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/query.h"
#include "flashindexer/rope.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cpu {

void quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                    int threads);
void dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                      int threads);
void quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                    int threads);
void dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                      int threads);

void insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                    const TensorView& slot_mapping, const RopeOptions& rope, int threads);
void gather_k_workspace(const TensorView& values, const TensorView& scales,
                        const PagedKCache& cache, const TensorView& block_table,
                        const TensorView& cu_seq_lens, int threads);

void mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean,
                int threads);
void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean, int threads);

// workspace: threads * topk_thread_workspace_bytes(k) bytes.
void topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                  bool sorted, int threads, void* workspace);
size_t topk_thread_workspace_bytes(int k);

// Scratch of the CPU indexer: indexer_slots(threads) slots of indexer_thread_workspace_bytes(k).
size_t indexer_thread_workspace_bytes(int k);
size_t indexer_slots(int threads);
int resolve_threads(int requested);

// `source` (optional): the candidate output, written from the scores as they stream (see
// indexer.cpp); its block maxima are allocated per call, ceil(width / cb) floats per row of a slot.
void indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                     const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                     bool sorted, const CandidateOutput& source, void* workspace, int threads);
void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted,
                    const CandidateOutput& source, void* workspace, int threads);

// IndexerOptions::scores on the CPU: scores[t, i] = the score of the key out[t, i] names (the
// scoring core's bits: each selected key scored again against its row), -inf where out[t, i] is
// -1. Prefill: key ks[t] + out[t, i]; decode: position out[t, i] of row t's request.
void selected_scores_prefill(const TensorView& scores, const TensorView& out,
                             const QuantizedTensor& q, const QuantizedTensor& keys,
                             const TensorView& weights, const TensorView& ks, int k, int threads);
void selected_scores_decode(const TensorView& scores, const TensorView& out,
                            const QuantizedTensor& q, const PagedKCache& cache,
                            const TensorView& weights, const TensorView& block_table, int k,
                            int threads);

// The transport-free multi-GPU functions of flashindexer/dist.h (dcp.cpp, row_shard.cpp).
void dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                         const TensorView& local_topk, const TensorView& row_starts, int k,
                         int rank, const DcpGroup& group, int threads);
void dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                     const TensorView& local_topk, int k, int rank,
                                     const DcpGroup& group, int threads);

// workspace: threads * dcp_merge_thread_workspace_bytes(ranks, k) bytes.
void dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                    bool sorted, int threads, void* workspace);
size_t dcp_merge_thread_workspace_bytes(int ranks, int k);

// sizes[0, tp) from costs[0, rows) (both plain arrays; see tp_row_shard_plan in dist.h).
void tp_row_shard_plan(int32_t* sizes, const int64_t* costs, int64_t rows, int tp);

}  // namespace flashindexer::cpu

namespace flashindexer::cpu {

// One row of spec §3.2 / §3.3 quantization, shared by the quantizers and the cache writer.
void quantize_k_fp8_row(uint8_t* values, float* scale, const float* x, int head_dim);
// The same with the amax floor given (the query form's eps; keys use 1e-4).
void quantize_fp8_row(uint8_t* values, float* scale, const float* x, int head_dim, float floor);

// RoPE (rope.h) on one vector of head_dim floats at cos_sin_cache row `position`, in place; the
// rotated values rounded to bf16.
void apply_rope(float* x, int head_dim, const RopeOptions& rope, int64_t position);
int64_t rope_position(const RopeOptions& rope, int64_t row);

// The query quantizers of query.h; quant.weight_scale is resolved (nonzero).
void quantize_query_fp8(const TensorView& values, const TensorView& weights_out,
                        const TensorView& q, const TensorView& weights,
                        const QueryQuantOptions& quant, int threads);
void quantize_query_mxfp4(const TensorView& values, const TensorView& scales,
                          const TensorView& weights_out, const TensorView& q,
                          const TensorView& weights, const QueryQuantOptions& quant, int threads);
void quantize_mxfp4_row(uint8_t* values, uint8_t* scales, const float* x, int head_dim);

}  // namespace flashindexer::cpu
