#include "cpu/score.h"

#include <cstring>

namespace flashindexer::cpu {

void load_query_row(QueryRow& row, const QuantizedTensor& q, int64_t b, int64_t j,
                    const TensorView& weights, int64_t weight_row) {
  const TensorView& values = q.values;
  const bool paged = values.rank == 4;
  const bool mxfp4 = values.dtype == DType::kE2M1x2;
  row.heads = static_cast<int>(values.shape[values.rank - 2]);
  row.head_dim = static_cast<int>(mxfp4 ? values.shape[values.rank - 1] * 2
                                        : values.shape[values.rank - 1]);
  for (int h = 0; h < row.heads; ++h) {
    float* out = row.q + h * row.head_dim;
    const uint8_t* head_values = paged ? element<uint8_t>(values, b, j, h, 0)
                                       : element<uint8_t>(values, b, h, 0);
    if (mxfp4) {
      const uint8_t* head_scales = paged ? element<uint8_t>(q.scales, b, j, h, 0)
                                         : element<uint8_t>(q.scales, b, h, 0);
      decode_mxfp4_row(out, head_values, head_scales, row.head_dim);
    } else {
      decode_fp8_row(out, head_values, row.head_dim);
    }
    row.weights[h] = *element<float>(weights, weight_row, h);
  }
}

void PackedKeys::load(int64_t first, int count, float* rows, float* scales, int head_dim) const {
  const bool mxfp4 = keys_.values.dtype == DType::kE2M1x2;
  for (int i = 0; i < count; ++i) {
    const uint8_t* values = element<uint8_t>(keys_.values, first + i, 0);
    if (mxfp4) {
      decode_mxfp4_row(rows + i * head_dim, values, element<uint8_t>(keys_.scales, first + i, 0),
                       head_dim);
      scales[i] = 1.0f;
    } else {
      decode_fp8_row(rows + i * head_dim, values, head_dim);
      scales[i] = *element<float>(keys_.scales, first + i);
    }
  }
}

void PagedKeys::load(int64_t first, int count, float* rows, float* scales, int head_dim) const {
  const int64_t value_bytes = cache_.value_bytes_per_key();
  const int64_t scale_bytes = cache_.scale_bytes_per_key();
  for (int i = 0; i < count; ++i) {
    const int64_t position = first + i;
    const int64_t page = block_table_row_[position / cache_.page_size];
    const int64_t slot = position % cache_.page_size;
    const uint8_t* page_base =
        static_cast<const uint8_t*>(cache_.data) + page * cache_.page_stride_bytes;
    const uint8_t* values = page_base + slot * value_bytes;
    const uint8_t* key_scales = page_base + cache_.page_size * value_bytes + slot * scale_bytes;
    if (cache_.format == KFormat::kMXFP4) {
      decode_mxfp4_row(rows + i * head_dim, values, key_scales, head_dim);
      scales[i] = 1.0f;
    } else {
      decode_fp8_row(rows + i * head_dim, values, head_dim);
      std::memcpy(&scales[i], key_scales, sizeof(float));
    }
  }
}

}  // namespace flashindexer::cpu
