// SPDX-License-Identifier: Apache-2.0
// CPU page-cache writer and workspace gather (spec §4.2, §4.3, §4.6).
#include <cstring>

#include "cpu/cpu_ops.h"
#include "cpu/elements.h"

namespace flashindexer::cpu {
namespace {

constexpr int kMaxHeadDim = 128;  // the cache's head_dim is checked to be 64 or 128

struct KeyLocation {
  uint8_t* values;
  uint8_t* scales;
};

KeyLocation locate(const PagedKCache& cache, int64_t page, int64_t row) {
  uint8_t* page_base = static_cast<uint8_t*>(cache.data) + page * cache.page_stride_bytes;
  const int64_t value_bytes = cache.value_bytes_per_key();
  return {page_base + row * value_bytes,
          page_base + cache.page_size * value_bytes + row * cache.scale_bytes_per_key()};
}

}  // namespace

void insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                    const TensorView& slot_mapping, const RopeOptions& rope, int threads) {
  const int64_t count = slot_mapping.shape[0];
  const int head_dim = cache.head_dim;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const int64_t slot = slot_mapping.dtype == DType::kI64 ? *element<int64_t>(slot_mapping, i)
                                                           : *element<int32_t>(slot_mapping, i);
    if (slot < 0) continue;
    float key[kMaxHeadDim];
    load_floats(key, keys, i * keys.stride[0], head_dim);
    if (rope.enabled()) apply_rope(key, head_dim, rope, rope_position(rope, i));
    const KeyLocation at = locate(cache, slot / cache.page_size, slot % cache.page_size);
    if (cache.format == KFormat::kFP8) {
      float scale;
      quantize_k_fp8_row(at.values, &scale, key, head_dim);
      std::memcpy(at.scales, &scale, sizeof scale);
    } else {
      quantize_mxfp4_row(at.values, at.scales, key, head_dim);
    }
  }
}

void gather_k_workspace(const TensorView& values, const TensorView& scales,
                        const PagedKCache& cache, const TensorView& block_table,
                        const TensorView& cu_seq_lens, int threads) {
  const int64_t requests = block_table.shape[0];
  const int64_t value_bytes = cache.value_bytes_per_key();
  const int64_t scale_bytes = cache.scale_bytes_per_key();
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t begin = *element<int32_t>(cu_seq_lens, r);
    const int64_t length = *element<int32_t>(cu_seq_lens, r + 1) - begin;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t j = 0; j < length; ++j) {
      const int64_t page = *element<int32_t>(block_table, r, j / cache.page_size);
      const KeyLocation at = locate(cache, page, j % cache.page_size);
      std::memcpy(element<uint8_t>(values, begin + j, 0), at.values, value_bytes);
      // FP8 scales are [Nws] f32, MXFP4 scales [Nws, D/32] ue8m0: copy the bytes either way.
      uint8_t* scale_out = scales.rank == 1
                               ? reinterpret_cast<uint8_t*>(element<float>(scales, begin + j))
                               : element<uint8_t>(scales, begin + j, 0);
      std::memcpy(scale_out, at.scales, scale_bytes);
    }
  }
}

}  // namespace flashindexer::cpu
