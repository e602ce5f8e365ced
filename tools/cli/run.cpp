// `flashindexer run`: builds the K cache (on the CPU), scores the workload's batches on the
// chosen device (dense logits + top-k, and the indexer), then checks on the host
//   1. the K cache and the gathered workspace against the reference quantizer,
//   2. indexer_* == topk_per_row(*mqa_logits) as sets on every row (a library contract),
//   3. a sample of rows against the reference oracle: every visible logit within the derived
//      tolerance (fp32 rounding, plus the FP8 tensor cores' accumulation on CUDA:
//      reference::score_tolerance), and the reference top-k of the backend's logits == the
//      indexer's set.
#include "cli/run.h"

#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli/device_memory.h"
#include "cli/workload.h"
#include "flashindexer/flashindexer.h"
#include "reference/reference.h"

namespace flashindexer::cli {
namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitFailure = 2;
constexpr int kExampleRows = 3;       // rows per batch whose selection is printed
constexpr int kExampleIndices = 8;    // selected indices printed per example row
constexpr int kMismatchExamples = 4;  // offending keys printed per mismatching row
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

// ----------------------------------------------------------------------------------------------
// Execution

struct BatchResult {
  std::vector<int32_t> indexer_topk;  // [rows, k] i32 from indexer_prefill / indexer_decode
  std::vector<int32_t> dense_topk;    // [rows, k] i32 topk_per_row over `logits`
  std::vector<float> logits;          // [rows, logits_row_stride] f32, clean (-inf outside)
  int64_t logits_row_stride = 0;
  double indexer_ms = 0.0;
  double logits_ms = 0.0;
  double topk_ms = 0.0;
};

struct RunResult {
  Device device = Device::kCPU;           // where the batches were scored
  std::vector<uint8_t> cache;             // [num_pages, page_stride_bytes] u8 after the insert
  std::vector<uint8_t> workspace_values;  // [Nws, D] e4m3 after the gather
  std::vector<float> workspace_scales;    // [Nws] f32
  double insert_ms = 0.0;
  double gather_ms = 0.0;
  std::vector<BatchResult> batches;  // parallel to Workload::batches
};

// Logits rows padded as vLLM pads them (spec §6.4): 1 KiB aligned, at least 256 spare columns.
int64_t padded_row_stride(int64_t width) { return (width + 256 + 255) / 256 * 256; }

// Scores one batch densely (logits, then topk_per_row) and with the indexer, timing each.
// Prefill batches score `workspace`; decode batches score `cache` through their block table.
Status run_batch(BatchResult* result, DeviceMemory& memory, const Batch& batch, int heads, int k,
                 const QuantizedTensor& workspace, const PagedKCache& cache,
                 const RunOptions& indexer_options) {
  const BatchShape& shape = *batch.shape;
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const int64_t requests = static_cast<int64_t>(shape.requests.size());
  const int next_n = shape.next_n;

  QuantizedTensor q;  // prefill [M, H, D] e4m3; decode [B, next_n, H, D] e4m3
  if (shape.decode) {
    CLI_RETURN_IF_ERROR(
        upload_view(&q.values, memory, batch.q, DType::kE4M3, {requests, next_n, heads, kHeadDim}));
  } else {
    CLI_RETURN_IF_ERROR(
        upload_view(&q.values, memory, batch.q, DType::kE4M3, {rows, heads, kHeadDim}));
  }
  TensorView weights;      // [rows, H] f32
  TensorView indexer_out;  // [rows, k] i32
  TensorView dense_out;    // [rows, k] i32
  TensorView logits;       // [rows, width] f32, padded rows
  CLI_RETURN_IF_ERROR(upload_view(&weights, memory, batch.weights, DType::kF32, {rows, heads}));
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
  // keys any row sees lets kAuto pick the CUDA path (RunOptions::min_row_keys).
  RunOptions options = indexer_options;
  if (!shape.decode) options.min_row_keys = batch.fewest_row_keys;
  CLI_RETURN_IF_ERROR(timed(&result->indexer_ms, memory, [&] {
    return shape.decode ? indexer_decode(indexer_out, q, cache, weights, context_lens, block_table,
                                         k, unsorted, options)
                        : indexer_prefill(indexer_out, q, workspace, weights, ks, ke, k, unsorted,
                                          options);
  }));

  CLI_RETURN_IF_ERROR(download_vector(&result->indexer_topk, memory, indexer_out.data, rows * k));
  CLI_RETURN_IF_ERROR(download_vector(&result->dense_topk, memory, dense_out.data, rows * k));
  return download_vector(&result->logits, memory, logits.data, rows * result->logits_row_stride);
}

// The K cache after inserting every key, and the prefill chunk gathered from it into the packed
// workspace, in `memory`.
struct KeyStore {
  PagedKCache cache;
  QuantizedTensor workspace;  // values [Nws, D] e4m3, scales [Nws] f32
};

// Builds the key store on the CPU (insert_k_cache and gather_k_workspace have no CUDA kernels
// yet), timing both, and copies what the checks read back into `result`.
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
  cache.format = KFormat::kFP8;
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
  CLI_RETURN_IF_ERROR(allocate_view(&workspace.values, memory, DType::kE4M3,
                                    {workspace_keys, kHeadDim}, kValuePoison));
  CLI_RETURN_IF_ERROR(
      allocate_view(&workspace.scales, memory, DType::kF32, {workspace_keys}, kValuePoison));
  CLI_RETURN_IF_ERROR(upload_view(&gather_table, memory, prefill.block_table, DType::kI32,
                                  {prefill_requests, prefill.block_table_width}));
  CLI_RETURN_IF_ERROR(
      upload_view(&cu_seq_lens, memory, prefill.cu_seq_lens, DType::kI32, {prefill_requests + 1}));
  CLI_RETURN_IF_ERROR(timed(&result->gather_ms, memory, [&] {
    return gather_k_workspace(workspace.values, workspace.scales, cache, gather_table, cu_seq_lens);
  }));

  CLI_RETURN_IF_ERROR(download_vector(&result->cache, memory, cache.data, cache_bytes));
  CLI_RETURN_IF_ERROR(download_vector(&result->workspace_values, memory, workspace.values.data,
                                      workspace_keys * kHeadDim));
  return download_vector(&result->workspace_scales, memory, workspace.scales.data, workspace_keys);
}

// The same key store in `memory` (a CUDA device), copied from the host results.
Status upload_key_store(KeyStore* store, DeviceMemory& memory, const RunResult& result) {
  store->cache.device = memory.device();
  CLI_RETURN_IF_ERROR(memory.upload(&store->cache.data, result.cache.data(), result.cache.size()));
  const int64_t workspace_keys = static_cast<int64_t>(result.workspace_scales.size());
  CLI_RETURN_IF_ERROR(upload_view(&store->workspace.values, memory, result.workspace_values,
                                  DType::kE4M3, {workspace_keys, kHeadDim}));
  return upload_view(&store->workspace.scales, memory, result.workspace_scales, DType::kF32,
                     {workspace_keys});
}

// Builds the key store (on the CPU), scores every batch on `device`, and copies what the checks
// read back to the host.
Status execute(RunResult* result, const Workload& workload, Device device) {
  result->device = device;
  const Preset& preset = *workload.preset;
  DeviceMemory host(Device::kCPU);
  KeyStore store;
  CLI_RETURN_IF_ERROR(build_key_store(&store, result, host, workload));
  DeviceMemory device_memory(device);
  DeviceMemory& memory = device == Device::kCPU ? host : device_memory;
  if (device != Device::kCPU) CLI_RETURN_IF_ERROR(upload_key_store(&store, memory, *result));

  // The indexer takes caller-owned scratch, so that its timing includes no allocation (on CUDA
  // it holds the logits slab the rows run through).
  RunOptions indexer_options;
  indexer_options.workspace_bytes = device == Device::kCPU
                                        ? indexer_cpu_workspace_size(preset.topk)
                                        : indexer_cuda_workspace_size(preset.topk);
  CLI_RETURN_IF_ERROR(memory.allocate(&indexer_options.workspace, indexer_options.workspace_bytes));
  result->batches.resize(workload.batches.size());
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    CLI_RETURN_IF_ERROR(run_batch(&result->batches[b], memory, workload.batches[b], preset.heads,
                                  preset.topk, store.workspace, store.cache, indexer_options));
  }
  return Status::Ok();
}

// ----------------------------------------------------------------------------------------------
// Checks

// Host views of what the reference functions read, over the workload and the downloaded
// results.
struct HostOperands {
  QuantizedTensor q;          // prefill [M, H, D] / decode [B, next_n, H, D] e4m3
  TensorView weights;         // [rows, H] f32
  TensorView block_table;     // decode: [B, P] i32
  QuantizedTensor workspace;  // prefill: values [Nws, D] e4m3, scales [Nws] f32
  PagedKCache cache;
};

HostOperands host_operands(const Workload& workload, const RunResult& result, size_t batch_index) {
  const Batch& batch = workload.batches[batch_index];
  const BatchShape& shape = *batch.shape;
  const int heads = workload.preset->heads;
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const int64_t requests = static_cast<int64_t>(shape.requests.size());
  // The views only read; the reference API takes mutable pointers.
  auto* q_data = const_cast<uint8_t*>(batch.q.data());
  HostOperands operands;
  operands.q.values =
      shape.decode
          ? TensorView::contiguous(q_data, DType::kE4M3, {requests, shape.next_n, heads, kHeadDim})
          : TensorView::contiguous(q_data, DType::kE4M3, {rows, heads, kHeadDim});
  operands.weights =
      TensorView::contiguous(const_cast<float*>(batch.weights.data()), DType::kF32, {rows, heads});
  operands.block_table = TensorView::contiguous(const_cast<int32_t*>(batch.block_table.data()),
                                                DType::kI32, {requests, batch.block_table_width});
  const int64_t workspace_keys = static_cast<int64_t>(result.workspace_scales.size());
  operands.workspace.values =
      TensorView::contiguous(const_cast<uint8_t*>(result.workspace_values.data()), DType::kE4M3,
                             {workspace_keys, kHeadDim});
  operands.workspace.scales = TensorView::contiguous(
      const_cast<float*>(result.workspace_scales.data()), DType::kF32, {workspace_keys});
  operands.cache.data = const_cast<uint8_t*>(result.cache.data());
  operands.cache.num_pages = workload.num_pages;
  operands.cache.page_size = kPageSize;
  operands.cache.head_dim = kHeadDim;
  operands.cache.page_stride_bytes = workload.page_stride_bytes;
  return operands;
}

std::string format_indices(const std::vector<int32_t>& indices) {
  std::string text;
  for (size_t i = 0; i < indices.size() && i < kMismatchExamples; ++i) {
    text += fmt::format("{}{}", i ? ", " : "", indices[i]);
  }
  if (indices.size() > kMismatchExamples) text += ", ...";
  return text;
}

// The first k entries of a top-k row as a sorted multiset (-1 padding included).
std::vector<int32_t> sorted_row(const std::vector<int32_t>& topk, int64_t row, int k) {
  std::vector<int32_t> set(topk.begin() + row * k, topk.begin() + (row + 1) * k);
  std::sort(set.begin(), set.end());
  return set;
}

// Empty when equal; otherwise what differs between two sorted multisets.
std::string set_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& expected,
                           std::string_view got_name, std::string_view expected_name) {
  std::vector<int32_t> only_got, only_expected;
  std::set_difference(got.begin(), got.end(), expected.begin(), expected.end(),
                      std::back_inserter(only_got));
  std::set_difference(expected.begin(), expected.end(), got.begin(), got.end(),
                      std::back_inserter(only_expected));
  if (only_got.empty() && only_expected.empty()) return {};
  return fmt::format("{} only in {} ({}), {} only in {} ({})", only_got.size(), got_name,
                     format_indices(only_got), only_expected.size(), expected_name,
                     format_indices(only_expected));
}

// Every inserted key must hold its spec §3.2 quantization in its cache slot, and every prefill
// key (the first workspace rows, in the same order) in the gathered workspace.
std::vector<std::string> check_k_cache(const Workload& workload, const RunResult& result) {
  std::vector<std::string> mismatches;
  int64_t bad_keys = 0;
  const int64_t workspace_keys = static_cast<int64_t>(result.workspace_scales.size());
  const int64_t values_per_page = int64_t{kPageSize} * kHeadDim;
  uint8_t expected_values[kHeadDim];
  float expected_scale = 0.0f;
  for (size_t key = 0; key < workload.slot_mapping.size(); ++key) {
    reference::quantize_fp8_row(expected_values, &expected_scale,
                                workload.keys.data() + key * kHeadDim, kHeadDim);
    const int64_t slot = workload.slot_mapping[key];
    const uint8_t* page = result.cache.data() + (slot / kPageSize) * workload.page_stride_bytes;
    const uint8_t* cached_values = page + (slot % kPageSize) * kHeadDim;
    float cached_scale;
    std::memcpy(&cached_scale, page + values_per_page + (slot % kPageSize) * 4, 4);
    std::string what;
    if (std::memcmp(cached_values, expected_values, kHeadDim) != 0 ||
        cached_scale != expected_scale) {
      what = fmt::format("cache slot {}", slot);
    } else if (static_cast<int64_t>(key) < workspace_keys &&
               (std::memcmp(result.workspace_values.data() + key * kHeadDim, expected_values,
                            kHeadDim) != 0 ||
                result.workspace_scales[key] != expected_scale)) {
      what = fmt::format("workspace row {}", key);
    }
    if (what.empty()) continue;
    if (bad_keys++ < kMismatchExamples) {
      mismatches.push_back(
          fmt::format("k cache: key {}: {} differs from the reference quantizer", key, what));
    }
  }
  if (bad_keys > kMismatchExamples) {
    mismatches.push_back(fmt::format("k cache: {} keys differ in all", bad_keys));
  }
  return mismatches;
}

// Empty when a top-k output row holds min(n, k) distinct indices in [0, n) followed by -1
// padding, as topk.h promises for a row with n visible keys; otherwise what is wrong.
std::string malformed_selection(const int32_t* selection, int64_t visible, int k) {
  const int64_t valid = std::min<int64_t>(visible, k);
  std::vector<bool> seen(visible, false);
  for (int64_t slot = 0; slot < k; ++slot) {
    const int32_t index = selection[slot];
    if (slot >= valid) {
      if (index != -1) return fmt::format("slot {} holds {} instead of -1 padding", slot, index);
    } else if (index < 0 || index >= visible) {
      return fmt::format("slot {} holds {}, outside [0, {})", slot, index, visible);
    } else if (seen[index]) {
      return fmt::format("index {} is selected twice", index);
    } else {
      seen[index] = true;
    }
  }
  return {};
}

// On every row: both selections well formed, and indexer_* selecting exactly the set
// topk_per_row selects from the dense logits (a library contract).
std::vector<std::string> check_selections(const Batch& batch, const BatchResult& result, int k) {
  std::vector<std::string> mismatches;
  for (size_t row = 0; row < batch.rows.size(); ++row) {
    const std::string where = fmt::format("{} row {}", batch.shape->name, row);
    const int64_t visible = batch.rows[row].key_end - batch.rows[row].key_begin;
    const std::string indexer_error =
        malformed_selection(result.indexer_topk.data() + row * k, visible, k);
    const std::string dense_error =
        malformed_selection(result.dense_topk.data() + row * k, visible, k);
    if (!indexer_error.empty()) {
      mismatches.push_back(fmt::format("{}: indexer output: {}", where, indexer_error));
    }
    if (!dense_error.empty()) {
      mismatches.push_back(fmt::format("{}: topk_per_row output: {}", where, dense_error));
    }
    const std::string difference = set_difference(
        sorted_row(result.indexer_topk, row, k), sorted_row(result.dense_topk, row, k),
        "the indexer's set", "topk_per_row(logits)'s set");
    if (!difference.empty()) {
      mismatches.push_back(fmt::format("{}: indexer != topk(logits): {}", where, difference));
    }
  }
  return mismatches;
}

// Up to `count` rows spread over the requests, the tie-heavy (repeated prompt) requests
// first, in round-robin order so that the first few rows come from different requests.
std::vector<int64_t> sample_rows(const Batch& batch, int count) {
  const auto& requests = batch.shape->requests;
  std::vector<std::vector<int64_t>> rows_of(requests.size());
  for (size_t row = 0; row < batch.rows.size(); ++row) {
    rows_of[batch.rows[row].request].push_back(static_cast<int64_t>(row));
  }
  std::vector<size_t> order(requests.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = r;
  std::stable_partition(order.begin(), order.end(),
                        [&](size_t r) { return requests[r].repeated_prompt_len > 0; });

  const int64_t total = std::min<int64_t>(count, static_cast<int64_t>(batch.rows.size()));
  std::vector<int64_t> visits(requests.size(), 0);
  for (int64_t assigned = 0; assigned < total;) {
    for (size_t r : order) {
      if (assigned < total && visits[r] < static_cast<int64_t>(rows_of[r].size())) {
        ++visits[r];
        ++assigned;
      }
    }
  }
  // Visit j of a request with m rows and v visits takes its row (m - 1) - j * m / v: the last
  // row (it sees the most keys) first, the others evenly spaced below it.
  std::vector<int64_t> sample;
  for (int64_t j = 0; static_cast<int64_t>(sample.size()) < total; ++j) {
    for (size_t r : order) {
      if (j >= visits[r]) continue;
      const int64_t m = static_cast<int64_t>(rows_of[r].size());
      sample.push_back(rows_of[r][(m - 1) - j * m / visits[r]]);
    }
  }
  return sample;
}

// Checks one sampled row: (a) every visible logit against the reference score, and the
// clean -inf outside the visible range; (b) the reference top-k of the backend's visible
// logits against the indexer's set.
std::vector<std::string> verify_row(const Workload& workload, const HostOperands& operands,
                                    size_t batch_index, const BatchResult& result, int64_t row,
                                    Device device) {
  const Batch& batch = workload.batches[batch_index];
  const QueryRow& query = batch.rows[row];
  const int heads = workload.preset->heads;
  const int k = workload.preset->topk;
  const float* logits = result.logits.data() + row * result.logits_row_stride;
  const std::string where = fmt::format("{} row {}", batch.shape->name, row);
  std::vector<std::string> mismatches;

  const int64_t visible_keys = query.key_end - query.key_begin;
  const std::vector<reference::Score> scores =  // [visible keys]
      batch.shape->decode
          ? reference::decode_scores(operands.q, operands.cache, operands.weights,
                                     operands.block_table, row, query.key_begin, query.key_end)
          : reference::prefill_scores(operands.q, operands.workspace, operands.weights, row,
                                      query.key_begin, query.key_end);
  int64_t bad_logits = 0;
  std::string examples;
  for (int64_t i = 0; i < visible_keys; ++i) {
    const float logit = logits[query.key_begin + i];
    // The CUDA scoring kernel sums the FP8 products on tensor cores (see score_tolerance).
    const double tolerance =
        reference::score_tolerance(scores[i].magnitude, kHeadDim, heads, device == Device::kCUDA) +
        1e-30;
    if (std::fabs(static_cast<double>(logit) - scores[i].value) <= tolerance) continue;  // !NaN
    if (bad_logits++ < kMismatchExamples) {
      examples += fmt::format(" key {}: {} vs {:.9g} (tolerance {:.3g});", i, logit,
                              scores[i].value, tolerance);
    }
  }
  if (bad_logits > 0) {
    mismatches.push_back(fmt::format("{}: {} of {} logits outside the tolerance:{}", where,
                                     bad_logits, visible_keys, examples));
  }
  int64_t unclean = 0;
  for (int64_t s = 0; s < batch.logits_width; ++s) {
    const bool visible = s >= query.key_begin && s < query.key_end;
    if (!visible && logits[s] != -std::numeric_limits<float>::infinity()) ++unclean;
  }
  if (unclean > 0) {
    mismatches.push_back(
        fmt::format("{}: {} invisible columns are not -inf with clean=true", where, unclean));
  }

  const std::vector<float> visible(logits + query.key_begin, logits + query.key_end);
  std::vector<int32_t> expected = reference::topk_of_scores(visible, k);
  expected.resize(k, -1);
  std::sort(expected.begin(), expected.end());
  const std::string difference = set_difference(sorted_row(result.indexer_topk, row, k), expected,
                                                "the indexer's set", "the reference top-k");
  if (!difference.empty()) mismatches.push_back(fmt::format("{}: {}", where, difference));
  return mismatches;
}

struct Verified {
  int64_t prefill_rows = 0;
  int64_t decode_rows = 0;
};

// Every check on the results; returns one line per mismatch. `verify_rows` rows per phase go
// to the oracle: all of the prefill chunk's, an even share of them to each decode batch.
std::vector<std::string> check_all(Verified* verified, const Workload& workload,
                                   const RunResult& result, int verify_rows) {
  std::vector<std::string> mismatches = check_k_cache(workload, result);
  const int decode_batches = static_cast<int>(workload.batches.size()) - 1;
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    const Batch& batch = workload.batches[b];
    const int decode_index = static_cast<int>(b) - 1;
    const int rows_to_verify =
        batch.shape->decode
            ? verify_rows / decode_batches + (decode_index < verify_rows % decode_batches ? 1 : 0)
            : verify_rows;
    for (std::string& line : check_selections(batch, result.batches[b], workload.preset->topk)) {
      mismatches.push_back(std::move(line));
    }
    const HostOperands operands = host_operands(workload, result, b);
    for (int64_t row : sample_rows(batch, rows_to_verify)) {
      for (std::string& line :
           verify_row(workload, operands, b, result.batches[b], row, result.device)) {
        mismatches.push_back(std::move(line));
      }
      ++(batch.shape->decode ? verified->decode_rows : verified->prefill_rows);
    }
  }
  return mismatches;
}

// ----------------------------------------------------------------------------------------------
// Report

double flops_per_pair(int heads) { return 2.0 * heads * kHeadDim; }

void print_header(const Workload& workload, Device device, const RunResult& result) {
  const Preset& preset = *workload.preset;
  fmt::print("flashindexer {} run: preset {} ({}), device {}", kVersion, preset.name, preset.model,
             device_name(device));
  if (device == Device::kCPU) fmt::print(" ({} OpenMP threads)", omp_get_max_threads());
  fmt::print(", seed {}\n", workload.seed);
  fmt::print("shapes: H={} D={} k={}, FP8 e4m3 K cache: page size {}, {} pages, page stride {} B\n",
             preset.heads, kHeadDim, preset.topk, kPageSize, workload.num_pages,
             workload.page_stride_bytes);
  fmt::print(
      "k cache (on the CPU): insert_k_cache {} keys {:.2f} ms, gather_k_workspace {} keys "
      "{:.2f} ms\n",
      workload.slot_mapping.size(), result.insert_ms, result.workspace_scales.size(),
      result.gather_ms);
  for (const Batch& batch : workload.batches) {
    std::string contexts;
    for (const RequestShape& request : batch.shape->requests) {
      contexts += fmt::format("{}{}{}", contexts.empty() ? "" : " ", request.context_len,
                              request.repeated_prompt_len > 0 ? "*" : "");
    }
    const char* layout = !batch.shape->decode ? "the packed workspace (ks/ke [M])"
                         : batch.shape->per_token_lens
                             ? "the paged cache (context_lens [B, next_n])"
                             : "the paged cache (context_lens [B])";
    fmt::print("{}: {} requests, {} rows over {}; keys per request {}\n", batch.shape->name,
               batch.shape->requests.size(), batch.rows.size(), layout, contexts);
  }
  fmt::print("(* = holds a repeated prompt: a run of identical keys, ties at the k-th score)\n\n");
}

void print_timings(const Workload& workload, const RunResult& result) {
  const int heads = workload.preset->heads;
  fmt::print("{:<16} {:>5} {:>10} {:>11} {:>8} {:>8} {:>9} {:>11} {:>9}\n", "batch", "rows",
             "pairs", "indexer ms", "TFLOP/s", "Mkeys/s", "logits ms", "top-k ms", "TFLOP/s");
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    const Batch& batch = workload.batches[b];
    const BatchResult& timing = result.batches[b];
    const double pairs = static_cast<double>(batch.visible_pairs);
    const double dense_ms = timing.logits_ms + timing.topk_ms;
    fmt::print("{:<16} {:>5} {:>10} {:>11.2f} {:>8.4f} {:>8.2f} {:>9.2f} {:>11.2f} {:>9.4f}\n",
               batch.shape->name, batch.rows.size(), batch.visible_pairs, timing.indexer_ms,
               pairs * flops_per_pair(heads) / (timing.indexer_ms * 1e9),
               pairs / (timing.indexer_ms * 1e3), timing.logits_ms, timing.topk_ms,
               pairs * flops_per_pair(heads) / (dense_ms * 1e9));
  }
  fmt::print(
      "(pairs = visible (row, key) pairs; TFLOP/s = pairs * H * D * 2 / time; the last "
      "column is the dense path, logits + top-k)\n\n");
}

// A few rows' selections: the first indices of the set in ascending order with their scores,
// and how many visible keys tie with the k-th (lowest selected) score.
void print_examples(const Workload& workload, const RunResult& result) {
  const int k = workload.preset->topk;
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    const Batch& batch = workload.batches[b];
    const BatchResult& batch_result = result.batches[b];
    fmt::print("{} examples:\n", batch.shape->name);
    for (int64_t row : sample_rows(batch, kExampleRows)) {
      const QueryRow& query = batch.rows[row];
      const float* logits =
          batch_result.logits.data() + row * batch_result.logits_row_stride + query.key_begin;
      std::vector<int32_t> selected = sorted_row(batch_result.indexer_topk, row, k);
      std::erase(selected, -1);
      const int64_t visible = query.key_end - query.key_begin;
      std::string ties = fmt::format("all {} visible keys selected", visible);
      if (visible > k && !selected.empty()) {
        float kth = logits[selected.front()];
        for (int32_t index : selected) kth = std::min(kth, logits[index]);
        const int64_t tied = std::count(logits, logits + visible, kth);
        const int64_t tied_selected = std::count_if(selected.begin(), selected.end(),
                                                    [&](int32_t i) { return logits[i] == kth; });
        ties = tied == 1 ? fmt::format("k-th score {:.6g}, not tied", kth)
                         : fmt::format("k-th score {:.6g} shared by {} keys, {} selected", kth,
                                       tied, tied_selected);
      }
      fmt::print("  row {} (request {}, position {}): {}\n   ", row, query.request, query.position,
                 ties);
      for (size_t i = 0; i < selected.size() && i < kExampleIndices; ++i) {
        fmt::print(" {}:{:.4g}", selected[i], logits[selected[i]]);
      }
      fmt::print("{}\n", selected.size() > kExampleIndices ? " ..." : "");
    }
  }
  fmt::print("\n");
}

void print_error(const Status& status) {
  fmt::print(stderr, "error ({}): {}\n", status_code_name(status.code()), status.message());
}

}  // namespace

int run_command(const RunConfig& config) {
  const Preset* preset = find_preset(config.preset);
  if (preset == nullptr) {
    fmt::print(stderr, "error: unknown preset '{}'\n", config.preset);
    return kExitFailure;
  }
  Workload workload;
  Status status = make_workload(&workload, *preset, config.seed);
  if (!status.ok()) {
    print_error(status);
    return kExitFailure;
  }

  // auto: CUDA when a device is visible and this build's CUDA backend runs the indexer.
  Device device = Device::kCPU;
  if (config.device == "cuda" || (config.device == "auto" && cuda_device_count() > 0)) {
    if (!build_info().cuda) {
      fmt::print(stderr, "error: this build has no CUDA backend (-DFLASHINDEXER_CUDA=ON)\n");
      return kExitFailure;
    }
    if (cuda_device_count() == 0) {
      fmt::print(stderr, "error: no CUDA device is visible\n");
      return kExitFailure;
    }
    device = Device::kCUDA;
  }
  RunResult result;
  status = execute(&result, workload, device);
  if (device == Device::kCUDA && config.device == "auto" &&
      status.code() == StatusCode::kUnsupported) {
    fmt::print("note: the CUDA backend does not run this workload ({}): running on the CPU\n",
               status.message());
    device = Device::kCPU;
    result = RunResult();
    status = execute(&result, workload, device);
  }
  if (!status.ok()) {
    print_error(status);
    return kExitFailure;
  }

  print_header(workload, device, result);
  print_timings(workload, result);
  print_examples(workload, result);

  const auto checks_start = std::chrono::steady_clock::now();
  Verified verified;
  const std::vector<std::string> mismatches =
      check_all(&verified, workload, result, config.verify_rows);
  const std::chrono::duration<double> checks_time = std::chrono::steady_clock::now() - checks_start;
  if (!mismatches.empty()) {
    for (const std::string& line : mismatches) fmt::print("MISMATCH {}\n", line);
    fmt::print("FAILED: {} mismatches\n", mismatches.size());
    return kExitMismatch;
  }
  fmt::print("k cache: {} keys and {} workspace rows equal the reference quantizer\n",
             workload.slot_mapping.size(), result.workspace_scales.size());
  fmt::print("indexer == topk_per_row(logits), well formed, on all rows of every batch\n");
  fmt::print("checks took {:.1f} s, most of it in the fp64 reference oracle\n",
             checks_time.count());
  fmt::print("verified: {} rows of prefill, {} rows of decode match the reference\n",
             verified.prefill_rows, verified.decode_rows);
  return 0;
}

}  // namespace flashindexer::cli
