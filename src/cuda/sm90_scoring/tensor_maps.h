// SPDX-License-Identifier: Apache-2.0
// The TMA tensor maps of the sm90 scoring calls (launch.cu): the queries and weights of both
// query forms, the packed and paged keys of both key formats. Each encoder describes its operand
// to cuTensorMapEncodeTiled and names it in the error; what the copies need of the operands
// (alignment, strides) is checked before, by the calls.
#pragma once

#include <cstdint>

#include "cuda/sm90_scoring/params.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::scoring {

// Weights [T, H] f32, rows_per_group rows a copy (both query forms).
Status encode_weights(ScoreMaps& maps, const char* op, const TensorView& weights, int64_t tokens,
                      int heads, int rows_per_group);
// FP8 Q [T, H, 128] with token stride `token_stride` bytes, and the weights. With lane-owned
// rows the Q map copies four rows per box in the order (byte, head % 2, row, head / 2) that the
// kernel's TileColumn reads; otherwise (byte, head, row), rows_per_group rows per box.
Status encode_queries(ScoreMaps& maps, const char* op, const TensorView& q, int64_t tokens,
                      int64_t token_stride, int heads, const TensorView& weights,
                      int rows_per_group, bool lane_owned_rows);
// MXFP4 Q [T, H, 64] packed, `box_rows` rows a copy, unswizzled into the staging buffer; the
// weights as encode_queries.
Status encode_mxfp4_queries(ScoreMaps& maps, const char* op, const TensorView& q, int64_t tokens,
                            int64_t token_stride, int heads, const TensorView& weights,
                            int rows_per_group, int box_rows);
// Packed keys of either format, FP8 [N, 128] + [N] f32 or MXFP4 [N, 64] + [N, 4] (a scale word a
// key), from keys.values' dtype: `rows` keys and `scale_rows` scales a copy.
Status encode_packed_keys(ScoreMaps& maps, const char* op, const QuantizedTensor& keys, int rows,
                          int scale_rows);
// Pages of either format (cache.format): the keys' values, then their scales (fp32 or a word a
// key), from the page's start, pages cache.page_stride_bytes apart (V4's FP8-sized MXFP4 pages use
// only their first page_size x 68 bytes); `rows` keys of one page a copy.
Status encode_paged_keys(ScoreMaps& maps, const char* op, const PagedKCache& cache, int rows);

}  // namespace flashindexer::cuda::scoring
