// SPDX-License-Identifier: Apache-2.0
// Reference selection: sort every visible key of a row under the total order of topk.h.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "flashindexer/formats.h"
#include "reference/reference.h"

namespace flashindexer::reference {

bool ranks_before(float score_a, int64_t index_a, float score_b, int64_t index_b) {
  const bool nan_a = std::isnan(score_a);
  const bool nan_b = std::isnan(score_b);
  if (nan_a != nan_b) return nan_b;                            // a number beats NaN
  if (!nan_a && score_a != score_b) return score_a > score_b;  // -0 == +0 falls through
  return index_a < index_b;
}

std::vector<int32_t> topk_of_scores(const std::vector<float>& scores, int k) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return ranks_before(scores[a], a, scores[b], b); });
  order.resize(std::min<size_t>(order.size(), static_cast<size_t>(k)));
  return order;
}

void topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k) {
  const int64_t rows = out.shape[0];
  for (int64_t row = 0; row < rows; ++row) {
    const Range range = row_range(ranges, row);
    std::vector<float> scores;
    for (int64_t s = range.start; s < range.end; ++s) {
      const int64_t offset = row * logits.stride[0] + s * logits.stride[1];
      scores.push_back(logits.dtype == DType::kBF16
                           ? bf16_to_float(static_cast<const uint16_t*>(logits.data)[offset])
                           : static_cast<const float*>(logits.data)[offset]);
    }
    const std::vector<int32_t> best = topk_of_scores(scores, k);
    int32_t* out_row = static_cast<int32_t*>(out.data) + row * out.stride[0];
    for (int i = 0; i < k; ++i) {
      out_row[i * out.stride[1]] = i < static_cast<int>(best.size()) ? best[i] : -1;
    }
  }
}

}  // namespace flashindexer::reference
