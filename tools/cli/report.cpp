// SPDX-License-Identifier: Apache-2.0
// `flashindexer run`, the report: the run's shapes, the timings, a few rows' selections and the
// checks' verdict; run_command drives the steps (run_steps.h).
#include <fmt/core.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/run.h"
#include "cli/run_steps.h"
#include "cli/workload.h"
#include "flashindexer/flashindexer.h"

namespace flashindexer::cli {
namespace {

constexpr int kExitMismatch = 1;
constexpr int kExitFailure = 2;
constexpr int kExampleRows = 3;     // rows per batch whose selection is printed
constexpr int kExampleIndices = 8;  // selected indices printed per example row

double flops_per_pair(int heads) { return 2.0 * heads * kHeadDim; }

void print_header(const Workload& workload, Device device, const RunResult& result) {
  const Preset& preset = *workload.preset;
  fmt::print("flashindexer {} run: preset {} ({}), device {}", kVersion, preset.name, preset.model,
             device_name(device));
  if (device == Device::kCPU) fmt::print(" ({} OpenMP threads)", omp_get_max_threads());
  fmt::print(", seed {}\n", workload.seed);
  const bool mxfp4 = workload.format == KFormat::kMXFP4;
  fmt::print("shapes: H={} D={} k={}, {} K cache: page size {}, {} pages, page stride {} B\n",
             preset.heads, kHeadDim, preset.topk, mxfp4 ? "MXFP4 (e2m1 + ue8m0)" : "FP8 e4m3",
             kPageSize, workload.num_pages, workload.page_stride_bytes);
  fmt::print(
      "k cache (on the {}): insert_k_cache {} keys {:.3f} ms, gather_k_workspace {} keys "
      "{:.3f} ms\n",
      device == Device::kCPU ? "CPU" : "GPU", workload.slot_mapping.size(), result.insert_ms,
      result.workspace_keys, result.gather_ms);
  // One query quantizer call per batch, each on that batch's rows.
  fmt::print("queries (on the {}): quantize_query_{}", device == Device::kCPU ? "CPU" : "GPU",
             mxfp4 ? "mxfp4" : "fp8");
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    fmt::print("{} {} {} rows x {} heads {:.3f} ms", b == 0 ? "" : ",",
               workload.batches[b].shape->name, workload.batches[b].rows.size(), preset.heads,
               result.batches[b].quantize_ms);
  }
  if (mxfp4) {
    fmt::print(" (no RoPE)\n");
  } else {
    fmt::print(" (eps {:g}, no RoPE)\n", preset.query_eps);
  }
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
  Status status = make_workload(&workload, *preset, config.seed,
                                config.format == "mxfp4" ? KFormat::kMXFP4 : KFormat::kFP8);
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
             workload.slot_mapping.size(), result.workspace_keys);
  int64_t query_heads = 0;
  for (const Batch& batch : workload.batches)
    query_heads += static_cast<int64_t>(batch.weights.size());
  fmt::print(
      "queries: {} heads' quantized values and weights equal the reference quantizer; every "
      "scoring call read them\n",
      query_heads);
  fmt::print("indexer == topk_per_row(logits), well formed, on all rows of every batch\n");
  if (workload.preset->candidate_blocks > 0) {
    for (size_t b = 0; b < workload.batches.size(); ++b) {
      fmt::print(
          "{}: candidate source (C={}, cb={}) indexer with its candidate output {:.2f} ms, "
          "consumer layer indexer {:.2f} ms\n",
          workload.batches[b].shape->name, workload.preset->candidate_blocks,
          workload.preset->candidate_block_size, result.batches[b].source_ms,
          result.batches[b].consumer_ms);
    }
    fmt::print(
        "two-level: the source's blocks and top-k and the consumer's selection == the "
        "reference (candidates.h) over the backend's logits, on all rows of every batch\n");
  }
  fmt::print("checks took {:.1f} s, most of it in the fp64 reference oracle\n",
             checks_time.count());
  fmt::print("verified: {} rows of prefill, {} rows of decode match the reference\n",
             verified.prefill_rows, verified.decode_rows);
  return 0;
}

}  // namespace flashindexer::cli
