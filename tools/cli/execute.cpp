// SPDX-License-Identifier: Apache-2.0
// `flashindexer run`, the execution: the K cache built and gathered on the chosen device, then
// every batch's queries quantized and the batch scored there (dense logits + top-k, and the
// indexer), each op timed, and what the checks read downloaded to the host.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cli/device_memory.h"
#include "cli/run_steps.h"
#include "cli/workload.h"
#include "flashindexer/flashindexer.h"

namespace flashindexer::cli {
namespace {

// Outputs start as poison, so that an element an op fails to write cannot pass for a result:
// bytes 0xA5 make an i32 that is neither an index nor -1; bytes 0xFF are NaN in f32 and e4m3.
constexpr uint8_t kIndexPoison = 0xA5;
constexpr uint8_t kValuePoison = 0xFF;

// Runs `op`, waits for the device, and stores the wall time in milliseconds. On CUDA a first,
// untimed call loads the kernels (lazy module loading), so that the timing covers the work.
template <typename Op>
Status timed(double* milliseconds, const DeviceMemory& memory, Op&& op) {
  if (memory.device() == Device::kCUDA) {
    CLI_RETURN_IF_ERROR(op());
    CLI_RETURN_IF_ERROR(memory.synchronize());
  }
  const auto start = std::chrono::steady_clock::now();
  Status status = op();
  if (status.ok()) status = memory.synchronize();
  const auto stop = std::chrono::steady_clock::now();
  *milliseconds = std::chrono::duration<double, std::milli>(stop - start).count();
  return status;
}

// Logits rows padded as vLLM pads them (spec §6.4): 1 KiB aligned, at least 256 spare columns.
int64_t padded_row_stride(int64_t width) { return (width + 256 + 255) / 256 * 256; }

// Quantizes the batch's f32 queries on the memory's device, timing it, into `q` and `weights`
// ([rows, H] f32), and downloads both for the checks: quantize_query_fp8 with the model's eps
// and the default weight scale D^-1/2 * H^-1/2 (prefill [M, H, D], decode [B, next_n, H, D]
// e4m3, the scale folded into the weights), or quantize_query_mxfp4 (values [.., H, D/2]
// e2m1x2 and scales [.., H, D/32] ue8m0, the weights only scaled).
Status quantize_queries(QuantizedTensor* q, TensorView* weights, BatchResult* result,
                        DeviceMemory& memory, const Batch& batch, const Preset& preset,
                        KFormat format) {
  const int heads = preset.heads;
  const BatchShape& shape = *batch.shape;
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const bool mxfp4 = format == KFormat::kMXFP4;
  const int64_t value_bytes = mxfp4 ? kHeadDim / 2 : kHeadDim;  // a head's
  const int64_t scale_bytes = kHeadDim / kMxfp4BlockSize;       // an MXFP4 head's
  const DType value_type = mxfp4 ? DType::kE2M1x2 : DType::kE4M3;
  TensorView raw_q;        // [rows, H, D] f32
  TensorView raw_weights;  // [rows, H] f32
  TensorView values;       // [rows, H, value_bytes]
  TensorView scales;       // MXFP4: [rows, H, scale_bytes] ue8m0
  CLI_RETURN_IF_ERROR(upload_view(&raw_q, memory, batch.q, DType::kF32, {rows, heads, kHeadDim}));
  CLI_RETURN_IF_ERROR(upload_view(&raw_weights, memory, batch.weights, DType::kF32, {rows, heads}));
  CLI_RETURN_IF_ERROR(
      allocate_view(&values, memory, value_type, {rows, heads, value_bytes}, kValuePoison));
  if (mxfp4) {
    CLI_RETURN_IF_ERROR(
        allocate_view(&scales, memory, DType::kUE8M0, {rows, heads, scale_bytes}, kValuePoison));
  }
  CLI_RETURN_IF_ERROR(allocate_view(weights, memory, DType::kF32, {rows, heads}, kValuePoison));
  QueryQuantOptions quant;
  quant.eps = preset.query_eps;
  CLI_RETURN_IF_ERROR(timed(&result->quantize_ms, memory, [&] {
    return mxfp4 ? quantize_query_mxfp4(values, scales, *weights, raw_q, raw_weights, quant)
                 : quantize_query_fp8(values, *weights, raw_q, raw_weights, quant);
  }));
  // A decode batch's rows are b * next_n + j: the same buffers are its [B, next_n, H, ...] query.
  const int64_t requests = static_cast<int64_t>(shape.requests.size());
  const auto decode_view = [&](const TensorView& view, DType dtype, int64_t inner) {
    return TensorView::contiguous(view.data, dtype, {requests, shape.next_n, heads, inner},
                                  memory.device());
  };
  q->values = shape.decode ? decode_view(values, value_type, value_bytes) : values;
  if (mxfp4) q->scales = shape.decode ? decode_view(scales, DType::kUE8M0, scale_bytes) : scales;
  CLI_RETURN_IF_ERROR(
      download_vector(&result->q_values, memory, values.data, rows * heads * value_bytes));
  if (mxfp4) {
    CLI_RETURN_IF_ERROR(
        download_vector(&result->q_scales, memory, scales.data, rows * heads * scale_bytes));
  }
  return download_vector(&result->q_weights, memory, weights->data, rows * heads);
}

// Quantizes one batch's queries, then scores the batch densely (logits, then topk_per_row) and
// with the indexer, timing each. Prefill batches score `workspace`; decode batches score `cache`
// through their block table.
Status run_batch(BatchResult* result, DeviceMemory& memory, const Batch& batch,
                 const Preset& preset, const QuantizedTensor& workspace, const PagedKCache& cache,
                 KFormat format, const RunOptions& indexer_run) {
  const int k = preset.topk;
  const BatchShape& shape = *batch.shape;
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const int64_t requests = static_cast<int64_t>(shape.requests.size());
  const int next_n = shape.next_n;

  QuantizedTensor q;   // prefill [M, H, ...]; decode [B, next_n, H, ...]
  TensorView weights;  // [rows, H] f32 (FP8: the query scales folded in)
  CLI_RETURN_IF_ERROR(quantize_queries(&q, &weights, result, memory, batch, preset, format));
  TensorView indexer_out;  // [rows, k] i32
  TensorView dense_out;    // [rows, k] i32
  TensorView logits;       // [rows, width] f32, padded rows
  CLI_RETURN_IF_ERROR(allocate_view(&indexer_out, memory, DType::kI32, {rows, k}, kIndexPoison));
  CLI_RETURN_IF_ERROR(allocate_view(&dense_out, memory, DType::kI32, {rows, k}, kIndexPoison));
  result->logits_row_stride = padded_row_stride(batch.logits_width);
  void* logits_data = nullptr;
  CLI_RETURN_IF_ERROR(memory.allocate(
      &logits_data, rows * result->logits_row_stride * sizeof(float), kValuePoison));
  logits =
      TensorView::contiguous(logits_data, DType::kF32, {rows, batch.logits_width}, memory.device())
          .with_row_stride(result->logits_row_stride);

  TensorView ks, ke;        // prefill: [M] i32
  TensorView context_lens;  // decode: [B] or [B, next_n] i32
  TensorView block_table;   // decode: [B, P] i32
  RowRanges ranges;
  if (shape.decode) {
    if (shape.per_token_lens) {
      CLI_RETURN_IF_ERROR(
          upload_view(&context_lens, memory, batch.context_lens, DType::kI32, {requests, next_n}));
      // topk_per_row reads per-row lengths as a flat [rows] view of the same buffer.
      ranges = RowRanges::decode(
          TensorView::contiguous(context_lens.data, DType::kI32, {rows}, memory.device()));
    } else {
      CLI_RETURN_IF_ERROR(
          upload_view(&context_lens, memory, batch.context_lens, DType::kI32, {requests}));
      ranges = RowRanges::decode(context_lens, next_n);
    }
    CLI_RETURN_IF_ERROR(upload_view(&block_table, memory, batch.block_table, DType::kI32,
                                    {requests, batch.block_table_width}));
  } else {
    CLI_RETURN_IF_ERROR(upload_view(&ks, memory, batch.ks, DType::kI32, {rows}));
    CLI_RETURN_IF_ERROR(upload_view(&ke, memory, batch.ke, DType::kI32, {rows}));
    ranges = RowRanges::prefill(ks, ke);
  }

  // The dense path runs first and so also warms caches and threads for the indexer's timing.
  CLI_RETURN_IF_ERROR(timed(&result->logits_ms, memory, [&] {
    return shape.decode ? paged_mqa_logits(logits, q, cache, weights, context_lens, block_table)
                        : mqa_logits(logits, q, workspace, weights, ks, ke);
  }));
  // On CUDA, few rows are split across CTAs, which needs scratch (none on the CPU: it allocates).
  RunOptions topk_options;
  if (memory.device() == Device::kCUDA) {
    topk_options.workspace_bytes = topk_per_row_cuda_workspace_size(rows, batch.logits_width, k);
    CLI_RETURN_IF_ERROR(memory.allocate(&topk_options.workspace, topk_options.workspace_bytes));
  }
  CLI_RETURN_IF_ERROR(timed(&result->topk_ms, memory, [&] {
    return topk_per_row(dense_out, logits, ranges, k, TopKOptions{}, topk_options);
  }));
  const TopKOptions unsorted{.sorted = false};
  // A serving engine knows what its prefill rows see without reading ks / ke back: the fewest
  // keys any row sees lets kAuto pick the CUDA path (IndexerOptions::min_row_keys).
  IndexerOptions choice;
  if (!shape.decode) choice.min_row_keys = batch.fewest_row_keys;
  const auto run_indexer = [&](const IndexerOptions& options, const TensorView& out) {
    return shape.decode ? indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                         unsorted, options, indexer_run)
                        : indexer_prefill(out, q, workspace, weights, ks, ke, k, unsorted, options,
                                          indexer_run);
  };
  CLI_RETURN_IF_ERROR(
      timed(&result->indexer_ms, memory, [&] { return run_indexer(choice, indexer_out); }));
  if (preset.candidate_blocks > 0) {
    CLI_RETURN_IF_ERROR(run_candidate_layers(result, memory, batch, preset, run_indexer));
  }

  CLI_RETURN_IF_ERROR(download_vector(&result->indexer_topk, memory, indexer_out.data, rows * k));
  CLI_RETURN_IF_ERROR(download_vector(&result->dense_topk, memory, dense_out.data, rows * k));
  return download_vector(&result->logits, memory, logits.data, rows * result->logits_row_stride);
}

// The K cache after inserting every key, and the prefill chunk gathered from it into the packed
// workspace, in `memory`.
struct KeyStore {
  PagedKCache cache;
  QuantizedTensor workspace;  // FP8: values [Nws, D] e4m3, scales [Nws] f32; MXFP4: values
                              // [Nws, D/2] e2m1x2, scales [Nws, D/32] ue8m0
};

// Builds the key store in `memory` (insert_k_cache from the f32 keys, then gather_k_workspace of
// the prefill chunk), timing both, and copies what the checks read back into `result`.
Status build_key_store(KeyStore* store, RunResult* result, DeviceMemory& memory,
                       const Workload& workload) {
  const int64_t num_keys = static_cast<int64_t>(workload.slot_mapping.size());
  TensorView keys;          // [N, D] f32
  TensorView slot_mapping;  // [N] i64
  CLI_RETURN_IF_ERROR(upload_view(&keys, memory, workload.keys, DType::kF32, {num_keys, kHeadDim}));
  CLI_RETURN_IF_ERROR(
      upload_view(&slot_mapping, memory, workload.slot_mapping, DType::kI64, {num_keys}));
  PagedKCache& cache = store->cache;
  cache.device = memory.device();
  cache.format = workload.format;
  cache.num_pages = workload.num_pages;
  cache.page_size = kPageSize;
  cache.head_dim = kHeadDim;
  cache.page_stride_bytes = workload.page_stride_bytes;
  const size_t cache_bytes = workload.num_pages * workload.page_stride_bytes;
  CLI_RETURN_IF_ERROR(memory.allocate(&cache.data, cache_bytes));
  CLI_RETURN_IF_ERROR(
      timed(&result->insert_ms, memory, [&] { return insert_k_cache(cache, keys, slot_mapping); }));

  const Batch& prefill = workload.batches.front();
  const int64_t workspace_keys = prefill.cu_seq_lens.back();
  const int64_t prefill_requests = static_cast<int64_t>(prefill.shape->requests.size());
  QuantizedTensor& workspace = store->workspace;
  TensorView gather_table;  // [R, P] i32
  TensorView cu_seq_lens;   // [R + 1] i32
  const bool mxfp4 = workload.format == KFormat::kMXFP4;
  const int64_t value_bytes = mxfp4 ? kHeadDim / 2 : kHeadDim;  // a key's
  constexpr int64_t kScaleBytes = 4;  // a key's: one f32, or D/32 = 4 ue8m0
  CLI_RETURN_IF_ERROR(allocate_view(&workspace.values, memory,
                                    mxfp4 ? DType::kE2M1x2 : DType::kE4M3,
                                    {workspace_keys, value_bytes}, kValuePoison));
  if (mxfp4) {
    CLI_RETURN_IF_ERROR(allocate_view(&workspace.scales, memory, DType::kUE8M0,
                                      {workspace_keys, kHeadDim / kMxfp4BlockSize}, kValuePoison));
  } else {
    CLI_RETURN_IF_ERROR(
        allocate_view(&workspace.scales, memory, DType::kF32, {workspace_keys}, kValuePoison));
  }
  CLI_RETURN_IF_ERROR(upload_view(&gather_table, memory, prefill.block_table, DType::kI32,
                                  {prefill_requests, prefill.block_table_width}));
  CLI_RETURN_IF_ERROR(
      upload_view(&cu_seq_lens, memory, prefill.cu_seq_lens, DType::kI32, {prefill_requests + 1}));
  CLI_RETURN_IF_ERROR(timed(&result->gather_ms, memory, [&] {
    return gather_k_workspace(workspace.values, workspace.scales, cache, gather_table, cu_seq_lens);
  }));

  result->workspace_keys = workspace_keys;
  CLI_RETURN_IF_ERROR(download_vector(&result->cache, memory, cache.data, cache_bytes));
  CLI_RETURN_IF_ERROR(download_vector(&result->workspace_values, memory, workspace.values.data,
                                      workspace_keys * value_bytes));
  return download_vector(&result->workspace_scales, memory, workspace.scales.data,
                         workspace_keys * kScaleBytes);
}

}  // namespace

Status execute(RunResult* result, const Workload& workload, Device device) {
  result->device = device;
  const Preset& preset = *workload.preset;
  DeviceMemory memory(device);
  KeyStore store;
  CLI_RETURN_IF_ERROR(build_key_store(&store, result, memory, workload));

  // The indexer takes caller-owned scratch, so that its timing includes no allocation (on CUDA
  // it holds the logits slab the rows run through).
  RunOptions indexer_run;
  indexer_run.workspace_bytes = device == Device::kCPU ? indexer_cpu_workspace_size(preset.topk)
                                                       : indexer_cuda_workspace_size(preset.topk);
  CLI_RETURN_IF_ERROR(memory.allocate(&indexer_run.workspace, indexer_run.workspace_bytes));
  result->batches.resize(workload.batches.size());
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    CLI_RETURN_IF_ERROR(run_batch(&result->batches[b], memory, workload.batches[b], preset,
                                  store.workspace, store.cache, workload.format, indexer_run));
  }
  return Status::Ok();
}

}  // namespace flashindexer::cli
