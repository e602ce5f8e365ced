// SPDX-License-Identifier: Apache-2.0
// Scoring: the indexer logits (spec §2.3, §2.4, §6.4, §7.2).
//
//   logit[t, s] = kscale[s] * sum_h W[t, h] * relu( q[t, h, :] . k[s, :] )      (FP8 keys)
//   logit[t, s] =             sum_h W[t, h] * relu( deq(q[t, h, :]) . deq(k[s, :]) )  (MXFP4)
//
// for every key s visible to row t, accumulated in fp32. FP8 queries carry no scale (it is
// folded into W); MXFP4 queries and keys carry one UE8M0 byte per 32 values.
// Supported: H in {32, 64}, D in {64, 128}.
#pragma once

#include "flashindexer/kcache.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

// A quantized operand: values plus, where the format has them, scales.
//   FP8 query:  values [..., D] e4m3,     scales undefined (folded into W)
//   FP8 keys:   values [N, D] e4m3,       scales [N] f32
//   MXFP4:      values [..., D/2] e2m1x2, scales [..., D/32] ue8m0
struct QuantizedTensor {
  TensorView values;
  TensorView scales;
};

struct LogitsOptions {
  // Write -inf at every column of a row outside its visible range. When false those
  // columns are left untouched (unspecified), as the serving engines run it.
  bool clean = true;
};

// Prefill scoring over the packed workspace. Row t sees keys ks[t] <= s < ke[t].
// logits: [M, >= N] f32 (out; row stride >= N); q: [M, H, D]; keys: [N, D] (+ scales);
// weights: [M, H] f32; ks, ke: [M] i32 with 0 <= ks <= ke <= N.
// MXFP4 on CUDA tensors: with options.workspace (16-byte aligned, at least
// mqa_logits_cuda_workspace_size(M, H, N) bytes) the call converts its keys and queries to e4m3
// there once and scores them with the FP8 kernel, about as fast as an FP8 call; without one, the
// kernel converts on chip (slower at prefill shapes). The logits have the same bits either way.
// Other calls ignore the workspace.
Status mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                  const TensorView& weights, const TensorView& ks, const TensorView& ke,
                  const LogitsOptions& logits_options = {}, const RunOptions& options = {});
// Bytes of the optional workspace of an MXFP4 mqa_logits call on CUDA tensors (M query rows, H
// heads, N keys; 0 in a build without CUDA).
size_t mqa_logits_cuda_workspace_size(int64_t rows, int heads, int64_t num_keys);

// Decode scoring over the paged cache. Row r = b * next_n + j sees context positions
// s < context_lens[b, j] (2-D form) or s < context_lens[b] - next_n + j + 1 (1-D form, spec
// §7.3); the key at position s is page block_table[b, s / page_size], row s % page_size.
// logits: [B * next_n, width] f32 (out; width >= every visible length); q: [B, next_n, H, D];
// weights: [B * next_n, H] f32; context_lens: [B] or [B, next_n] i32; block_table: [B, P] i32.
Status paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                        const PagedKCache& cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table,
                        const LogitsOptions& logits_options = {}, const RunOptions& options = {});

}  // namespace flashindexer
