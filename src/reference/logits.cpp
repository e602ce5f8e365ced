// SPDX-License-Identifier: Apache-2.0
// Reference scoring: the definition of spec §2.3 / §2.4 in fp64.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rows.h"
#include "reference/reference.h"

namespace flashindexer::reference {
namespace {

template <typename T>
const T* at(const TensorView& view, std::initializer_list<int64_t> index) {
  int64_t offset = 0;
  int dim = 0;
  for (int64_t i : index) offset += i * view.stride[dim++];
  return static_cast<const T*>(view.data) + offset;
}

int32_t read_i32(const TensorView& view, int64_t i) { return *at<int32_t>(view, {i}); }

bool is_mxfp4(const QuantizedTensor& operand) { return operand.values.dtype == DType::kE2M1x2; }

// Query head h of row t: q is [M, H, D] (prefill) or [B, next_n, H, D] viewed as rows.
std::vector<double> query_head(const QuantizedTensor& q, int64_t b, int64_t j, int64_t h,
                               int head_dim) {
  const bool paged = q.values.rank == 4;
  if (is_mxfp4(q)) {
    const uint8_t* values =
        paged ? at<uint8_t>(q.values, {b, j, h, 0}) : at<uint8_t>(q.values, {b, h, 0});
    const uint8_t* scales =
        paged ? at<uint8_t>(q.scales, {b, j, h, 0}) : at<uint8_t>(q.scales, {b, h, 0});
    return dequantize_mxfp4_row(values, scales, head_dim);
  }
  const uint8_t* values =
      paged ? at<uint8_t>(q.values, {b, j, h, 0}) : at<uint8_t>(q.values, {b, h, 0});
  return dequantize_fp8_row(values, head_dim, 1.0);
}

Score score(const std::vector<std::vector<double>>& heads, const float* weights,
            int64_t weight_stride, const std::vector<double>& key, double key_scale) {
  Score result{0.0, 0.0};
  for (size_t h = 0; h < heads.size(); ++h) {
    double dot = 0.0;
    double dot_magnitude = 0.0;
    for (size_t d = 0; d < key.size(); ++d) {
      dot += heads[h][d] * key[d];
      dot_magnitude += std::fabs(heads[h][d] * key[d]);
    }
    const double w = weights[h * weight_stride];
    result.value += w * std::max(dot, 0.0);
    result.magnitude += std::fabs(w) * dot_magnitude;
  }
  result.value *= key_scale;
  result.magnitude *= std::fabs(key_scale);
  return result;
}

int head_dim_of(const QuantizedTensor& operand) {
  const int64_t last = operand.values.shape[operand.values.rank - 1];
  return static_cast<int>(is_mxfp4(operand) ? last * 2 : last);
}

std::vector<std::vector<double>> query_heads(const QuantizedTensor& q, int64_t b, int64_t j) {
  const int rank = q.values.rank;
  const int64_t heads = q.values.shape[rank - 2];
  const int head_dim = head_dim_of(q);
  std::vector<std::vector<double>> result;
  for (int64_t h = 0; h < heads; ++h) result.push_back(query_head(q, b, j, h, head_dim));
  return result;
}

}  // namespace

namespace {

std::vector<double> packed_key(const QuantizedTensor& keys, int64_t s, double* key_scale) {
  const int head_dim = head_dim_of(keys);
  if (is_mxfp4(keys)) {
    *key_scale = 1.0;
    return dequantize_mxfp4_row(at<uint8_t>(keys.values, {s, 0}), at<uint8_t>(keys.scales, {s, 0}),
                                head_dim);
  }
  *key_scale = *at<float>(keys.scales, {s});
  return dequantize_fp8_row(at<uint8_t>(keys.values, {s, 0}), head_dim, 1.0);
}

std::vector<double> paged_key(const PagedKCache& cache, const TensorView& block_table, int64_t b,
                              int64_t pos, double* key_scale) {
  const int32_t page = *at<int32_t>(block_table, {b, pos / cache.page_size});
  const int64_t row = pos % cache.page_size;
  const uint8_t* page_base =
      static_cast<const uint8_t*>(cache.data) + page * cache.page_stride_bytes;
  const int64_t value_bytes = cache.value_bytes_per_key();
  const uint8_t* values = page_base + row * value_bytes;
  const uint8_t* scales =
      page_base + cache.page_size * value_bytes + row * cache.scale_bytes_per_key();
  if (cache.format == KFormat::kMXFP4) {
    *key_scale = 1.0;
    return dequantize_mxfp4_row(values, scales, cache.head_dim);
  }
  *key_scale = *reinterpret_cast<const float*>(scales);
  return dequantize_fp8_row(values, cache.head_dim, 1.0);
}

}  // namespace

std::vector<Score> prefill_scores(const QuantizedTensor& q, const QuantizedTensor& keys,
                                  const TensorView& weights, int64_t t, int64_t start,
                                  int64_t end) {
  const std::vector<std::vector<double>> heads = query_heads(q, t, 0);
  std::vector<Score> scores;
  for (int64_t s = start; s < end; ++s) {
    double key_scale;
    const std::vector<double> key = packed_key(keys, s, &key_scale);
    scores.push_back(score(heads, at<float>(weights, {t, 0}), weights.stride[1], key, key_scale));
  }
  return scores;
}

std::vector<Score> decode_scores(const QuantizedTensor& q, const PagedKCache& cache,
                                 const TensorView& weights, const TensorView& block_table,
                                 int64_t r, int64_t start, int64_t end) {
  const int64_t next_n = q.values.shape[1];
  const std::vector<std::vector<double>> heads = query_heads(q, r / next_n, r % next_n);
  std::vector<Score> scores;
  for (int64_t pos = start; pos < end; ++pos) {
    double key_scale;
    const std::vector<double> key = paged_key(cache, block_table, r / next_n, pos, &key_scale);
    scores.push_back(score(heads, at<float>(weights, {r, 0}), weights.stride[1], key, key_scale));
  }
  return scores;
}

double score_tolerance(double magnitude, int head_dim, int heads, bool tensor_cores) {
  const double fp32 = 4.0 * (head_dim + heads + 4) * std::ldexp(1.0, -24);
  return (fp32 + (tensor_cores ? std::ldexp(1.0, -11) : 0.0)) * magnitude;
}

Score prefill_score(const QuantizedTensor& q, const QuantizedTensor& keys,
                    const TensorView& weights, int64_t t, int64_t s) {
  return prefill_scores(q, keys, weights, t, s, s + 1)[0];
}

Score decode_score(const QuantizedTensor& q, const PagedKCache& cache, const TensorView& weights,
                   const TensorView& block_table, int64_t r, int64_t pos) {
  return decode_scores(q, cache, weights, block_table, r, pos, pos + 1)[0];
}

Range decode_range(const TensorView& context_lens, int next_n, int64_t row) {
  int64_t end;
  if (context_lens.rank == 2) {
    const int64_t columns = context_lens.shape[1];
    end = *at<int32_t>(context_lens, {row / columns, row % columns});
  } else if (next_n == 1) {
    end = read_i32(context_lens, row);
  } else {
    end = rows::decode_end(read_i32(context_lens, row / next_n), next_n,
                           static_cast<int>(row % next_n));
  }
  return {0, rows::decode_range(end, rows::kUnbounded).end};
}

Range row_range(const RowRanges& ranges, int64_t row) {
  if (ranges.is_prefill()) return {read_i32(ranges.ks, row), read_i32(ranges.ke, row)};
  return decode_range(ranges.lengths, ranges.next_n, row);
}

void mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean) {
  const int64_t rows = logits.shape[0];
  const int64_t width = logits.shape[1];
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t start = read_i32(ks, t);
    const int64_t end = read_i32(ke, t);
    float* out = static_cast<float*>(logits.data) + t * logits.stride[0];
    const std::vector<Score> scores = prefill_scores(q, keys, weights, t, start, end);
    for (int64_t s = 0; s < width; ++s) {
      if (s >= start && s < end) {
        out[s] = static_cast<float>(scores[s - start].value);
      } else if (clean) {
        out[s] = -std::numeric_limits<float>::infinity();
      }
    }
  }
}

void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean) {
  const int64_t rows = logits.shape[0];
  const int64_t width = logits.shape[1];
  const int next_n = static_cast<int>(q.values.shape[1]);
  for (int64_t r = 0; r < rows; ++r) {
    const Range range = decode_range(context_lens, next_n, r);
    float* out = static_cast<float*>(logits.data) + r * logits.stride[0];
    const std::vector<Score> scores =
        decode_scores(q, cache, weights, block_table, r, 0, range.end);
    for (int64_t s = 0; s < width; ++s) {
      if (s < range.end) {
        out[s] = static_cast<float>(scores[s].value);
      } else if (clean) {
        out[s] = -std::numeric_limits<float>::infinity();
      }
    }
  }
}

}  // namespace flashindexer::reference
