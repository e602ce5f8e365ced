// SPDX-License-Identifier: Apache-2.0
// insert_k_cache on CUDA tensors: the keys through the row kernels (src/cuda/quantize/), each
// into its slot of the paged cache, with the key's RoPE fused in when asked. Slots < 0 (padding)
// and slots at or past the cache's end are skipped by the kernel: reading the mapping on the
// host would need a synchronisation, and the write must stay inside the cache.
#include "cuda/cuda_ops.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda {

Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const RopeOptions& rope, void* stream) {
  const char* op = "insert_k_cache";
  quant::RowJob job;
  job.input = keys.data;
  job.input_bf16 = keys.dtype == DType::kBF16;
  job.input_rows = quant::rows_of(keys);
  job.rows = slot_mapping.shape[0];
  job.head_dim = cache.head_dim;
  job.rope = quant::rope_of(rope, cache.head_dim);
  quant::Destination& to = job.destination;
  to.slots = slot_mapping.data;
  to.slots_i64 = slot_mapping.dtype == DType::kI64;
  to.cache = static_cast<uint8_t*>(cache.data);
  to.page_stride = cache.page_stride_bytes;
  to.page_size = cache.page_size;
  to.scales_in_page = static_cast<int64_t>(cache.page_size) * cache.value_bytes_per_key();
  to.num_slots = cache.num_pages * cache.page_size;
  to.slots_fit_32 = to.num_slots <= int64_t{quant::FastDivisor::kMaxDividend} + 1;
  to.by_page_size = quant::FastDivisor(static_cast<uint32_t>(cache.page_size));
  to.by_page_size_64 = quant::FastDivisor64(static_cast<uint32_t>(cache.page_size));
  job.vector = quant::rows_aligned(keys, 16) && quant::aligned(cache.data, 16) &&
               cache.page_stride_bytes % 16 == 0;
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  return cache.format == KFormat::kFP8 ? quant::launch_fp8_rows(job, cuda_stream, op)
                                       : quant::launch_mxfp4_rows(job, cuda_stream, op);
}

}  // namespace flashindexer::cuda
