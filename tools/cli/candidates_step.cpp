// SPDX-License-Identifier: Apache-2.0
// `flashindexer run` on a preset with candidates (DeepSeek-V4.1 two-level selection): the
// candidate source layer runs the indexer with a candidate output (IndexerOptions::
// candidate_source), which returns its own top-k and publishes each row's best C blocks of cb
// positions without logits of its own, and a consumer layer on the same rows runs the indexer
// with those candidates (IndexerOptions::candidates; the dense route on CUDA). The checks hold
// both against candidates.h's reference oracle over the backend's own logits (the batch's
// dense pair, scored before).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/device_memory.h"
#include "cli/run_steps.h"
#include "cli/workload.h"
#include "flashindexer/flashindexer.h"
#include "reference/candidates.h"

namespace flashindexer::cli {
namespace {

constexpr uint8_t kIndexPoison = 0xA5;  // as execute.cpp: neither an index nor -1

// Each row's visible columns of the batch's logits as [rows] ks / ke (decode rows start at 0):
// the bounds of both layers, whatever form the batch's lengths take.
void row_bounds(const Batch& batch, std::vector<int32_t>* ks, std::vector<int32_t>* ke) {
  for (const QueryRow& row : batch.rows) {
    ks->push_back(static_cast<int32_t>(row.key_begin));
    ke->push_back(static_cast<int32_t>(row.key_end));
  }
}

template <typename Op>
Status timed(double* milliseconds, const DeviceMemory& memory, Op&& op) {
  if (memory.device() == Device::kCUDA) {  // the first call loads the kernels
    CLI_RETURN_IF_ERROR(op());
    CLI_RETURN_IF_ERROR(memory.synchronize());
  }
  const auto start = std::chrono::steady_clock::now();
  Status status = op();
  if (status.ok()) status = memory.synchronize();
  *milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return status;
}

}  // namespace

Status run_candidate_layers(
    BatchResult* result, DeviceMemory& memory, const Batch& batch, const Preset& preset,
    const std::function<Status(const IndexerOptions&, const TensorView&)>& run_indexer) {
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const int C = preset.candidate_blocks;
  const int cb = preset.candidate_block_size;
  TensorView candidates, source_out, consumer_out;
  CLI_RETURN_IF_ERROR(allocate_view(&candidates, memory, DType::kI32, {rows, C}, kIndexPoison));
  CLI_RETURN_IF_ERROR(
      allocate_view(&source_out, memory, DType::kI32, {rows, preset.topk}, kIndexPoison));
  CLI_RETURN_IF_ERROR(
      allocate_view(&consumer_out, memory, DType::kI32, {rows, preset.topk}, kIndexPoison));
  // The source's bounds are the call's own rows (prefill ks / ke, decode lengths): the same
  // visible columns as the batch's rows, which the checks use.
  IndexerOptions source;
  source.candidate_source = CandidateOutput{candidates, cb};
  CLI_RETURN_IF_ERROR(
      timed(&result->source_ms, memory, [&] { return run_indexer(source, source_out); }));
  IndexerOptions consumer;
  consumer.candidates = CandidateInput{candidates, cb, false};
  CLI_RETURN_IF_ERROR(
      timed(&result->consumer_ms, memory, [&] { return run_indexer(consumer, consumer_out); }));
  CLI_RETURN_IF_ERROR(download_vector(&result->candidates, memory, candidates.data, rows * C));
  CLI_RETURN_IF_ERROR(
      download_vector(&result->source_topk, memory, source_out.data, rows * preset.topk));
  return download_vector(&result->consumer_topk, memory, consumer_out.data, rows * preset.topk);
}

std::vector<std::string> check_candidate_layers(const Workload& workload, const RunResult& result) {
  std::vector<std::string> mismatches;
  const Preset& preset = *workload.preset;
  const int C = preset.candidate_blocks;
  const int cb = preset.candidate_block_size;
  const int k = preset.topk;
  for (size_t b = 0; b < workload.batches.size(); ++b) {
    const Batch& batch = workload.batches[b];
    const BatchResult& got = result.batches[b];
    const int64_t rows = static_cast<int64_t>(batch.rows.size());
    std::vector<int32_t> ks_host, ke_host;
    row_bounds(batch, &ks_host, &ke_host);
    const CandidateRows bounds =
        CandidateRows::prefill(TensorView::contiguous(ks_host.data(), DType::kI32, {rows}),
                               TensorView::contiguous(ke_host.data(), DType::kI32, {rows}));
    std::vector<float> logits_copy = got.logits;
    const TensorView logits =
        TensorView::contiguous(logits_copy.data(), DType::kF32, {rows, batch.logits_width})
            .with_row_stride(got.logits_row_stride);
    std::vector<int32_t> expected_blocks(static_cast<size_t>(rows * C));
    reference::select_candidate_blocks(
        TensorView::contiguous(expected_blocks.data(), DType::kI32, {rows, C}), logits, bounds, C,
        cb);
    std::vector<int32_t> expected_topk(static_cast<size_t>(rows * k));
    reference::candidate_topk_per_row(
        TensorView::contiguous(expected_topk.data(), DType::kI32, {rows, k}), logits, bounds,
        TensorView::contiguous(expected_blocks.data(), DType::kI32, {rows, C}), cb, k, false);
    for (int64_t r = 0; r < rows; ++r) {
      if (!std::equal(expected_blocks.begin() + r * C, expected_blocks.begin() + (r + 1) * C,
                      got.candidates.begin() + r * C)) {
        mismatches.push_back(fmt::format("{} row {}: candidate blocks differ from the reference",
                                         batch.shape->name, r));
        continue;
      }
      // The source's own top-k is unrestricted: the plain top-k of the batch's logits.
      if (sorted_row(got.source_topk, r, k) != sorted_row(got.dense_topk, r, k)) {
        mismatches.push_back(
            fmt::format("{} row {}: the source layer's own top-k differs from topk_per_row(logits)",
                        batch.shape->name, r));
      }
      if (sorted_row(got.consumer_topk, r, k) != sorted_row(expected_topk, r, k)) {
        mismatches.push_back(fmt::format(
            "{} row {}: the consumer's selection differs from the reference (top-k inside the "
            "candidate blocks)",
            batch.shape->name, r));
      }
    }
  }
  return mismatches;
}

}  // namespace flashindexer::cli
