// SPDX-License-Identifier: Apache-2.0
// Paged K cache buffers and decode problems over them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "reference/reference.h"
#include "support/operands.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Paged K cache

// An owning paged cache, every byte poisoned at construction. Move-only.
class CacheBuffer {
 public:
  CacheBuffer() = default;
  CacheBuffer(KFormat format, int64_t num_pages, int page_size, int head_dim,
              int64_t page_stride_bytes, uint8_t poison = kPoisonByte) {
    bytes_.assign(static_cast<size_t>(num_pages * page_stride_bytes) + 16, poison);
    cache_.data = bytes_.data();
    cache_.device = Device::kCPU;
    cache_.format = format;
    cache_.num_pages = num_pages;
    cache_.page_size = page_size;
    cache_.head_dim = head_dim;
    cache_.page_stride_bytes = page_stride_bytes;
  }
  CacheBuffer(const CacheBuffer&) = delete;
  CacheBuffer& operator=(const CacheBuffer&) = delete;
  CacheBuffer(CacheBuffer&&) = default;
  CacheBuffer& operator=(CacheBuffer&&) = default;

  const PagedKCache& cache() const { return cache_; }
  PagedKCache& cache() { return cache_; }
  uint8_t* base() { return bytes_.data(); }
  int64_t total_bytes() const { return cache_.num_pages * cache_.page_stride_bytes; }
  int64_t value_bytes() const { return value_bytes_per_row(cache_.format, cache_.head_dim); }
  int64_t scale_bytes() const { return scale_bytes_per_row(cache_.format, cache_.head_dim); }
  // Byte offsets of a slot's values and scales (spec §4.2 / §4.3), computed independently
  // of the library.
  int64_t values_offset(int64_t slot) const {
    return (slot / cache_.page_size) * cache_.page_stride_bytes +
           (slot % cache_.page_size) * value_bytes();
  }
  int64_t scales_offset(int64_t slot) const {
    return (slot / cache_.page_size) * cache_.page_stride_bytes + cache_.page_size * value_bytes() +
           (slot % cache_.page_size) * scale_bytes();
  }
  // Writes row `row` of a quantized keys operand into `slot`.
  void write_slot(int64_t slot, const Operand& keys, int64_t row) {
    std::memcpy(bytes_.data() + values_offset(slot), keys.values.bytes() + row * value_bytes(),
                value_bytes());
    std::memcpy(bytes_.data() + scales_offset(slot), keys.scales.bytes() + row * scale_bytes(),
                scale_bytes());
  }

 private:
  std::vector<uint8_t> bytes_;
  PagedKCache cache_;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decode problems: q [B, next_n, H, D], a shuffled paged cache holding every request's keys,
// context lengths in the 1-D ([B]) or 2-D ([B, next_n]) form.
struct DecodeConfig {
  KFormat format = KFormat::kFP8;
  int batch = 3;
  int next_n = 1;
  int heads = 32;
  int head_dim = 128;
  int page_size = 64;
  bool two_dim_lens = false;
  int64_t max_len = 300;         // context lengths drawn from [0, max_len]
  int64_t spare_pages = 3;       // pages no request uses
  int64_t stride_pad_bytes = 0;  // page stride = page bytes + this (multiple of 4)
};

struct DecodeProblem {
  DecodeConfig config;
  int64_t width = 0;                  // logits columns
  std::vector<int64_t> stored;        // keys stored per request (its longest visible length)
  std::vector<int64_t> ends;          // visible end per row, as the header defines it
  std::vector<Operand> request_keys;  // per request: keys [stored_b, D] in context order
  Operand q;                          // [B, next_n, H, D(/2)]
  HostTensor weights;                 // [B * next_n, H]
  HostTensor context_lens;            // [B] or [B, next_n] i32
  HostTensor block_table;             // [B, P] i32
  CacheBuffer cache;
  int64_t rows() const { return static_cast<int64_t>(config.batch) * config.next_n; }
};

// Fills the context lengths (the first request gets the extreme cases) and derives per-row ends.
inline DecodeProblem make_decode_problem(Rng& rng, const DecodeConfig& config,
                                         const std::vector<int32_t>& forced_lens = {}) {
  DecodeProblem p;
  p.config = config;
  const int B = config.batch;
  const int n = config.next_n;
  p.stored.assign(B, 0);
  p.ends.assign(static_cast<size_t>(B) * n, 0);
  std::vector<int32_t> lens;
  if (config.two_dim_lens) {
    p.context_lens = HostTensor(DType::kI32, {B, n});
  } else {
    p.context_lens = HostTensor(DType::kI32, {B});
  }
  const int64_t count = config.two_dim_lens ? int64_t{B} * n : B;
  for (int64_t i = 0; i < count; ++i) {
    int32_t len = static_cast<int32_t>(rng.uniform_int(0, config.max_len));
    if (i < static_cast<int64_t>(forced_lens.size())) len = forced_lens[i];
    p.context_lens.data<int32_t>()[i] = len;
  }
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < n; ++j) {
      int64_t end;
      if (config.two_dim_lens) {
        end = p.context_lens.data<int32_t>()[b * n + j];
      } else {
        end = static_cast<int64_t>(p.context_lens.data<int32_t>()[b]) - n + j + 1;
      }
      end = std::max<int64_t>(end, 0);
      p.ends[b * n + j] = end;
      p.stored[b] = std::max(p.stored[b], end);
    }
  }
  p.width = *std::max_element(p.stored.begin(), p.stored.end()) + rng.uniform_int(0, 5);
  p.width = std::max<int64_t>(p.width, 1);

  // Pages: each request needs ceil(stored / page_size); all pages shuffled.
  int64_t max_pages = 1;
  int64_t used_pages = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t pages = ceil_div(p.stored[b], config.page_size);
    used_pages += pages;
    max_pages = std::max(max_pages, pages);
  }
  const int64_t num_pages = used_pages + config.spare_pages;
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  rng.shuffle(page_ids);
  const int64_t table_columns = max_pages + 1;
  p.block_table = HostTensor(DType::kI32, {B, table_columns});
  // Columns past a request's pages hold some valid page (what engines leave there).
  for (int64_t i = 0; i < B * table_columns; ++i) {
    p.block_table.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(0, num_pages - 1));
  }
  const int64_t page_bytes =
      config.page_size * (value_bytes_per_row(config.format, config.head_dim) +
                          scale_bytes_per_row(config.format, config.head_dim));
  p.cache = CacheBuffer(config.format, num_pages, config.page_size, config.head_dim,
                        page_bytes + config.stride_pad_bytes);
  size_t next_page = 0;
  for (int b = 0; b < B; ++b) {
    p.request_keys.push_back(make_keys(rng, config.format, p.stored[b], config.head_dim));
    const int64_t pages = ceil_div(p.stored[b], config.page_size);
    for (int64_t c = 0; c < pages; ++c) p.block_table.at<int32_t>({b, c}) = page_ids[next_page++];
    for (int64_t s = 0; s < p.stored[b]; ++s) {
      const int64_t page = p.block_table.at<int32_t>({b, s / config.page_size});
      p.cache.write_slot(page * config.page_size + s % config.page_size, p.request_keys[b], s);
    }
  }
  p.q = make_query(rng, config.format, {B, n, config.heads}, config.head_dim);
  p.weights = make_weights(rng, p.rows(), config.heads);
  return p;
}

}  // namespace fitest
