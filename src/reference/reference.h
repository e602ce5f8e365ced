// SPDX-License-Identifier: Apache-2.0
// The oracle: plain scalar code, fp64 accumulation, obviously correct, slow.
//
// Every fast path is tested against these functions. They take host memory only, check
// nothing (callers pass valid arguments) and favour clarity over speed.
#pragma once

#include <cstdint>
#include <vector>

#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::reference {

// One quantized key or query-head row, dequantized exactly into doubles.
//   FP8:   values D bytes e4m3, scale = the fp32 row scale (1 for queries, folded into W)
//   MXFP4: values D/2 bytes, scales D/32 UE8M0 bytes
std::vector<double> dequantize_fp8_row(const uint8_t* values, int head_dim, double scale);
std::vector<double> dequantize_mxfp4_row(const uint8_t* values, const uint8_t* scales,
                                         int head_dim);

// Spec §3.2 / §3.3 quantization of one row of `head_dim` floats.
void quantize_fp8_row(uint8_t* values, float* scale, const float* input, int head_dim);
void quantize_mxfp4_row(uint8_t* values, uint8_t* scales, const float* input, int head_dim);

// The exact score of one (row, key) pair in fp64, and the magnitude that bounds the rounding
// error of an fp32 evaluation: bound = |kscale| * sum_h |W_h| * sum_d |q_hd * k_d|.
struct Score {
  double value;
  double magnitude;
};

// The most |logit - Score::value| a backend may show for a score of this magnitude bound. An
// fp32 evaluation rounds the D products' sums, the H head terms and a few scalings, each by at
// most 2^-24 of the magnitude (x4 headroom). FP8 tensor cores (the CUDA scoring kernel's wgmma)
// do not keep the full fp32 precision while they sum the D products: on an H200 their logits
// were seen up to 1.0e-4 (about 2^-13.3) of the magnitude from the exact score, so with
// tensor_cores the bound adds 2^-11 of it (4x headroom). Either way a wrong key, row, head or
// scale is far outside it.
double score_tolerance(double magnitude, int head_dim, int heads, bool tensor_cores);

// Query row t of a [M, H, D] operand and key row s of a [N, D] operand (FP8 or MXFP4, as the
// dtypes say); weights [M, H] f32.
Score prefill_score(const QuantizedTensor& q, const QuantizedTensor& keys,
                    const TensorView& weights, int64_t t, int64_t s);
// Decode row r = b * next_n + j of q [B, next_n, H, D], key at context position `pos` of request
// b read through the block table.
Score decode_score(const QuantizedTensor& q, const PagedKCache& cache, const TensorView& weights,
                   const TensorView& block_table, int64_t r, int64_t pos);

// The same for keys [start, end) of one row, dequantizing the row's query heads once.
std::vector<Score> prefill_scores(const QuantizedTensor& q, const QuantizedTensor& keys,
                                  const TensorView& weights, int64_t t, int64_t start, int64_t end);
std::vector<Score> decode_scores(const QuantizedTensor& q, const PagedKCache& cache,
                                 const TensorView& weights, const TensorView& block_table,
                                 int64_t r, int64_t start, int64_t end);

// Visible range [start, end) of a row, as RowRanges defines it.
struct Range {
  int64_t start;
  int64_t end;
};
Range row_range(const RowRanges& ranges, int64_t row);
// Decode visibility of paged_mqa_logits: context_lens [B] or [B, next_n].
Range decode_range(const TensorView& context_lens, int next_n, int64_t row);

// Logits by the definition: fp64 scores rounded once to fp32; -inf outside the range when
// `clean`. Shapes as the public ops.
void mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean);
void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean);

// True when key a ranks before key b under the total order of topk.h.
bool ranks_before(float score_a, int64_t index_a, float score_b, int64_t index_b);

// Top-k of every row by a full sort under the total order; output sorted best first, -1 tail.
// out [rows, >= k] i32; logits [rows, width] f32 or bf16.
void topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k);

// The same for one row of scores (relative indices).
std::vector<int32_t> topk_of_scores(const std::vector<float>& scores, int k);

}  // namespace flashindexer::reference
