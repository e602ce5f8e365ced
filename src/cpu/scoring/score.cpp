// SPDX-License-Identifier: Apache-2.0
#include "cpu/scoring/score.h"

#include <cstring>

namespace flashindexer::cpu {

void load_query_row(QueryRow& row, const QuantizedTensor& q, int64_t b, int64_t j,
                    const TensorView& weights, int64_t weight_row) {
  const TensorView& values = q.values;
  const bool paged = values.rank == 4;
  const bool mxfp4 = values.dtype == DType::kE2M1x2;
  row.heads = static_cast<int>(values.shape[values.rank - 2]);
  row.head_dim =
      static_cast<int>(mxfp4 ? values.shape[values.rank - 1] * 2 : values.shape[values.rank - 1]);
  for (int h = 0; h < row.heads; ++h) {
    float* out = row.q + h * row.head_dim;
    const uint8_t* head_values =
        paged ? element<uint8_t>(values, b, j, h, 0) : element<uint8_t>(values, b, h, 0);
    if (mxfp4) {
      const uint8_t* head_scales =
          paged ? element<uint8_t>(q.scales, b, j, h, 0) : element<uint8_t>(q.scales, b, h, 0);
      decode_mxfp4_row(out, head_values, head_scales, row.head_dim);
    } else {
      decode_fp8_row(out, head_values, row.head_dim);
    }
    row.weights[h] = *element<float>(weights, weight_row, h);
  }
}

}  // namespace flashindexer::cpu
