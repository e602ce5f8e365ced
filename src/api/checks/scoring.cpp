// SPDX-License-Identifier: Apache-2.0
#include "api/checks/scoring.h"

#include <algorithm>

#include "api/checks/topk.h"
#include "core/access.h"
#include "core/rows.h"
#include "flashindexer/formats.h"

namespace flashindexer {
namespace {

bool supported_heads(int64_t heads) { return heads == 32 || heads == 64; }
bool supported_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

// q values [..., H, D or D/2] and, for MXFP4, scales [..., H, D/32]. Returns the dims.
ScoringDims check_query(ArgCheck& check, const QuantizedTensor& q, int rank) {
  ScoringDims dims;
  check.tensor("q.values", q.values, {DType::kE4M3, DType::kE2M1x2}, rank);
  if (!check.ok()) return dims;
  dims.mxfp4 = q.values.dtype == DType::kE2M1x2;
  dims.heads = static_cast<int>(q.values.shape[rank - 2]);
  dims.head_dim = static_cast<int>(q.values.shape[rank - 1] * (dims.mxfp4 ? 2 : 1));
  check.require(supported_heads(dims.heads), "q.values has H=", dims.heads,
                " heads, expected 32 or 64");
  check.require(supported_head_dim(dims.head_dim), "q.values has head dim D=", dims.head_dim,
                ", expected 64 or 128");
  if (dims.mxfp4) {
    check.tensor("q.scales", q.scales, {DType::kUE8M0}, rank);
    for (int d = 0; d + 1 < rank && check.ok(); ++d)
      check.dim("q.scales", q.scales, d, q.values.shape[d]);
    check.dim("q.scales", q.scales, rank - 1, dims.head_dim / kMxfp4BlockSize);
  } else {
    check.require(!q.scales.defined(),
                  "q.scales must be empty for FP8 queries (fold the query scale into weights)");
  }
  check.on_device("q.scales", q.scales, q.values.device);
  return dims;
}

void check_weights(ArgCheck& check, const TensorView& weights, const ScoringDims& dims,
                   Device device) {
  check.tensor("weights", weights, {DType::kF32}, 2)
      .dim("weights", weights, 0, dims.rows)
      .dim("weights", weights, 1, dims.heads)
      .on_device("weights", weights, device);
}

}  // namespace

void check_cache(ArgCheck& check, const PagedKCache& cache) {
  check.require(cache.data != nullptr || cache.num_pages == 0, "cache.data is null")
      .require(cache.num_pages >= 0, "cache.num_pages=", cache.num_pages, " is negative")
      .require(cache.page_size > 0, "cache.page_size=", cache.page_size,
               ", expected a positive key count")
      .require(supported_head_dim(cache.head_dim), "cache.head_dim=", cache.head_dim,
               ", expected 64 or 128");
  if (!check.ok()) return;
  const int64_t page_bytes = PagedKCache::page_bytes(cache.format, cache.page_size, cache.head_dim);
  check.require(cache.page_stride_bytes >= page_bytes && cache.page_stride_bytes % 4 == 0,
                "cache.page_stride_bytes=", cache.page_stride_bytes,
                ", expected a multiple of 4 that is at least the page size of ", page_bytes,
                " bytes");
}

ScoringDims check_prefill_scoring(ArgCheck& check, const QuantizedTensor& q,
                                  const QuantizedTensor& keys, const TensorView& weights,
                                  const TensorView& ks, const TensorView& ke,
                                  int64_t column_limit) {
  ScoringDims dims = check_query(check, q, 3);
  if (!check.ok()) return dims;
  const Device device = q.values.device;
  dims.rows = q.values.shape[0];
  const DType key_dtype = dims.mxfp4 ? DType::kE2M1x2 : DType::kE4M3;
  check.tensor("keys.values", keys.values, {key_dtype}, 2)
      .dim("keys.values", keys.values, 1, dims.mxfp4 ? dims.head_dim / 2 : dims.head_dim)
      .on_device("keys.values", keys.values, device);
  if (!check.ok()) return dims;
  const int64_t num_keys = keys.values.shape[0];
  if (dims.mxfp4) {
    check.tensor("keys.scales", keys.scales, {DType::kUE8M0}, 2)
        .dim("keys.scales", keys.scales, 0, num_keys)
        .dim("keys.scales", keys.scales, 1, dims.head_dim / kMxfp4BlockSize);
  } else {
    check.tensor("keys.scales", keys.scales, {DType::kF32}, 1)
        .dim("keys.scales", keys.scales, 0, num_keys);
  }
  check.on_device("keys.scales", keys.scales, device);
  check_weights(check, weights, dims, device);
  check.tensor("ks", ks, {DType::kI32}, 1).dim("ks", ks, 0, dims.rows).on_device("ks", ks, device);
  check.tensor("ke", ke, {DType::kI32}, 1).dim("ke", ke, 0, dims.rows).on_device("ke", ke, device);
  if (!check.ok() || device != Device::kCPU) return dims;
  const int64_t limit = column_limit < 0 ? num_keys : std::min(column_limit, num_keys);
  for (int64_t t = 0; t < dims.rows && check.ok(); ++t) {
    const int64_t start = *element<int32_t>(ks, t);
    const int64_t end = *element<int32_t>(ke, t);
    check.require(start >= 0 && start <= end && end <= limit, "row ", t, " has ks=", start,
                  ", ke=", end, ", expected 0 <= ks <= ke <= ", limit);
  }
  return dims;
}

ScoringDims check_paged_operands(ArgCheck& check, const QuantizedTensor& q,
                                 const PagedKCache& cache, const TensorView& weights,
                                 const TensorView& block_table) {
  ScoringDims dims = check_query(check, q, 4);
  if (!check.ok()) return dims;
  const Device device = q.values.device;
  const int64_t batch = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  dims.rows = batch * next_n;
  check_cache(check, cache);
  check
      .require(cache.device == device, "cache is on ", device_name(cache.device), ", expected ",
               device_name(device), " like q")
      .require(cache.head_dim == dims.head_dim, "cache.head_dim=", cache.head_dim,
               ", expected q's D=", dims.head_dim)
      .require((cache.format == KFormat::kMXFP4) == dims.mxfp4,
               "cache.format=", kformat_name(cache.format), " does not match q.values dtype ",
               dtype_name(q.values.dtype));
  check_weights(check, weights, dims, device);
  check.tensor("block_table", block_table, {DType::kI32}, 2)
      .dim("block_table", block_table, 0, batch)
      .on_device("block_table", block_table, device);
  return dims;
}

ScoringDims check_paged_scoring(ArgCheck& check, const QuantizedTensor& q, const PagedKCache& cache,
                                const TensorView& weights, const TensorView& context_lens,
                                const TensorView& block_table, int64_t column_limit) {
  ScoringDims dims = check_paged_operands(check, q, cache, weights, block_table);
  if (!check.ok()) return dims;
  const Device device = q.values.device;
  const int64_t batch = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  const int lens_rank = context_lens.rank == 2 ? 2 : 1;
  check.tensor("context_lens", context_lens, {DType::kI32}, lens_rank)
      .dim("context_lens", context_lens, 0, batch)
      .on_device("context_lens", context_lens, device);
  if (lens_rank == 2) check.dim("context_lens", context_lens, 1, next_n);
  if (!check.ok() || device != Device::kCPU) return dims;
  check_lengths_non_negative(check, "context_lens", context_lens);
  for (int64_t r = 0; r < dims.rows && check.ok(); ++r) {
    const int64_t end = rows::decode_row_end(context_lens, next_n, r);
    check.require(column_limit < 0 || end <= column_limit, "row ", r, " sees ", end,
                  " keys, more than the ", column_limit, " columns of logits");
    const int64_t pages = (end + cache.page_size - 1) / cache.page_size;
    check.require(pages <= block_table.shape[1], "block_table has ", block_table.shape[1],
                  " pages per request, row ", r, " needs ", pages);
    for (int64_t p = 0; p < pages && check.ok(); ++p) {
      const int32_t page = *element<int32_t>(block_table, r / next_n, p);
      check.require(page >= 0 && page < cache.num_pages, "block_table[", r / next_n, ", ", p,
                    "]=", page, " is out of range, expected 0 <= page < ", cache.num_pages);
    }
  }
  return dims;
}

}  // namespace flashindexer
