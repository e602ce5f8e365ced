// SPDX-License-Identifier: Apache-2.0
// Public page-cache entry points: validate, then run on the tensors' device.
#include "flashindexer/kcache.h"

#include "api/checks/scoring.h"
#include "api/dispatch.h"
#include "api/rope.h"
#include "core/access.h"
#include "cuda/cuda_ops.h"
#include "flashindexer/formats.h"

namespace flashindexer {

Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const KeyInsertOptions& insert,
                      const RunOptions& options) {
  ArgCheck check("insert_k_cache");
  check_cache(check, cache);
  check.tensor("keys", keys, {DType::kF32, DType::kBF16}, 2)
      .tensor("slot_mapping", slot_mapping, {DType::kI64, DType::kI32}, 1);
  if (!check.ok()) return check.status();
  check.dim("keys", keys, 1, cache.head_dim)
      .dim_at_least("keys", keys, 0, slot_mapping.shape[0])
      .on_device("slot_mapping", slot_mapping, keys.device)
      .require(cache.device == keys.device, "cache is on ", device_name(cache.device),
               ", expected ", device_name(keys.device), " like keys");
  check_rope(check, insert.rope, cache.head_dim, slot_mapping.shape[0], keys.device);
  if (!check.ok()) return check.status();
  if (keys.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::insert_k_cache(cache, keys, slot_mapping, insert.rope, options.cuda_stream);
  }
  const int64_t slots = cache.num_pages * cache.page_size;
  for (int64_t i = 0; i < slot_mapping.shape[0] && check.ok(); ++i) {
    const int64_t slot = slot_mapping.dtype == DType::kI64 ? *element<int64_t>(slot_mapping, i)
                                                           : *element<int32_t>(slot_mapping, i);
    check.require(slot < slots, "slot_mapping[", i, "]=", slot,
                  " is out of range, expected -1 or 0 <= slot < ", slots);
    if (slot >= 0 && insert.rope.enabled()) check_rope_position(check, insert.rope, i);
  }
  if (!check.ok()) return check.status();
  cpu::insert_k_cache(cache, keys, slot_mapping, insert.rope, cpu_threads(options));
  return Status::Ok();
}

Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const RunOptions& options) {
  return insert_k_cache(cache, keys, slot_mapping, KeyInsertOptions{}, options);
}

Status gather_k_workspace(const TensorView& values, const TensorView& scales,
                          const PagedKCache& cache, const TensorView& block_table,
                          const TensorView& cu_seq_lens, const RunOptions& options) {
  ArgCheck check("gather_k_workspace");
  check_cache(check, cache);
  const bool mxfp4 = cache.format == KFormat::kMXFP4;
  check.tensor("values", values, {mxfp4 ? DType::kE2M1x2 : DType::kE4M3}, 2)
      .tensor("scales", scales, {mxfp4 ? DType::kUE8M0 : DType::kF32}, mxfp4 ? 2 : 1)
      .tensor("block_table", block_table, {DType::kI32}, 2)
      .tensor("cu_seq_lens", cu_seq_lens, {DType::kI32}, 1);
  if (!check.ok()) return check.status();
  const int64_t workspace_keys = values.shape[0];
  check.dim("values", values, 1, cache.value_bytes_per_key())
      .dim("scales", scales, 0, workspace_keys)
      .dim("cu_seq_lens", cu_seq_lens, 0, block_table.shape[0] + 1)
      .on_device("scales", scales, values.device)
      .on_device("block_table", block_table, values.device)
      .on_device("cu_seq_lens", cu_seq_lens, values.device)
      .require(cache.device == values.device, "cache is on ", device_name(cache.device),
               ", expected ", device_name(values.device), " like values");
  if (mxfp4) check.dim("scales", scales, 1, cache.head_dim / kMxfp4BlockSize);
  if (!check.ok()) return check.status();
  if (values.device == Device::kCUDA) {
    // The lengths and pages live on the device: the kernel skips what is out of range.
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::gather_k_workspace(values, scales, cache, block_table, cu_seq_lens,
                                    options.cuda_stream);
  }
  const int64_t requests = block_table.shape[0];
  check.require(*element<int32_t>(cu_seq_lens, 0) >= 0, "cu_seq_lens[0] is negative");
  for (int64_t r = 0; r < requests && check.ok(); ++r) {
    const int64_t begin = *element<int32_t>(cu_seq_lens, r);
    const int64_t end = *element<int32_t>(cu_seq_lens, r + 1);
    check.require(begin <= end && end <= workspace_keys, "cu_seq_lens[", r, "..", r + 1,
                  "]=", begin, "..", end, ", expected nondecreasing offsets up to ", workspace_keys,
                  " keys");
    const int64_t pages = (end - begin + cache.page_size - 1) / cache.page_size;
    check.require(pages <= block_table.shape[1], "block_table has ", block_table.shape[1],
                  " pages per request, request ", r, " needs ", pages);
    for (int64_t p = 0; p < pages && check.ok(); ++p) {
      const int32_t page = *element<int32_t>(block_table, r, p);
      check.require(page >= 0 && page < cache.num_pages, "block_table[", r, ", ", p, "]=", page,
                    " is out of range, expected 0 <= page < ", cache.num_pages);
    }
  }
  if (!check.ok()) return check.status();
  cpu::gather_k_workspace(values, scales, cache, block_table, cu_seq_lens, cpu_threads(options));
  return Status::Ok();
}

}  // namespace flashindexer
