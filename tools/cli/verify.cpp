// SPDX-License-Identifier: Apache-2.0
// `flashindexer run`, the checks on the host, over the downloaded results: the K cache and the
// gathered workspace against the reference quantizer, the quantized queries and folded weights
// against the query oracle, indexer_* == topk_per_row(*mqa_logits) on every row, and a sample of
// rows against the reference oracle (run_steps.h) over the very queries the backend scored.
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "cli/run_steps.h"
#include "cli/workload.h"
#include "flashindexer/flashindexer.h"
#include "reference/query.h"
#include "reference/reference.h"

namespace flashindexer::cli {
namespace {

constexpr int kMismatchExamples = 4;  // offending keys printed per mismatching row

// Host views of what the reference functions read, over the workload and the downloaded
// results (the queries and weights the query quantizer wrote on the device).
struct HostOperands {
  QuantizedTensor q;          // prefill [M, H, ...] / decode [B, next_n, H, ...]
  TensorView weights;         // [rows, H] f32
  TensorView block_table;     // decode: [B, P] i32
  QuantizedTensor workspace;  // prefill: FP8 [Nws, D] e4m3 + [Nws] f32; MXFP4 [Nws, D/2] + [Nws, 4]
  PagedKCache cache;
};

// The bytes of one quantized key or query head of `format`: its values, and its scale bytes
// (FP8 keys: one f32; MXFP4: D/32 ue8m0).
int64_t value_bytes_of(KFormat format) {
  return format == KFormat::kMXFP4 ? kHeadDim / 2 : kHeadDim;
}
constexpr int64_t kMxfp4ScaleBytes = kHeadDim / kMxfp4BlockSize;

HostOperands host_operands(const Workload& workload, const RunResult& result, size_t batch_index) {
  const Batch& batch = workload.batches[batch_index];
  const BatchShape& shape = *batch.shape;
  const int heads = workload.preset->heads;
  const int64_t rows = static_cast<int64_t>(batch.rows.size());
  const int64_t requests = static_cast<int64_t>(shape.requests.size());
  const BatchResult& scored = result.batches[batch_index];
  const bool mxfp4 = workload.format == KFormat::kMXFP4;
  const DType value_type = mxfp4 ? DType::kE2M1x2 : DType::kE4M3;
  const int64_t value_bytes = value_bytes_of(workload.format);
  // The views only read; the reference API takes mutable pointers.
  const auto query_view = [&](const std::vector<uint8_t>& bytes, DType dtype, int64_t inner) {
    auto* data = const_cast<uint8_t*>(bytes.data());
    return shape.decode
               ? TensorView::contiguous(data, dtype, {requests, shape.next_n, heads, inner})
               : TensorView::contiguous(data, dtype, {rows, heads, inner});
  };
  HostOperands operands;
  operands.q.values = query_view(scored.q_values, value_type, value_bytes);
  if (mxfp4) operands.q.scales = query_view(scored.q_scales, DType::kUE8M0, kMxfp4ScaleBytes);
  operands.weights = TensorView::contiguous(const_cast<float*>(scored.q_weights.data()),
                                            DType::kF32, {rows, heads});
  operands.block_table = TensorView::contiguous(const_cast<int32_t*>(batch.block_table.data()),
                                                DType::kI32, {requests, batch.block_table_width});
  const int64_t workspace_keys = result.workspace_keys;
  operands.workspace.values =
      TensorView::contiguous(const_cast<uint8_t*>(result.workspace_values.data()), value_type,
                             {workspace_keys, value_bytes});
  auto* workspace_scales = const_cast<uint8_t*>(result.workspace_scales.data());
  operands.workspace.scales =
      mxfp4 ? TensorView::contiguous(workspace_scales, DType::kUE8M0,
                                     {workspace_keys, kMxfp4ScaleBytes})
            : TensorView::contiguous(workspace_scales, DType::kF32, {workspace_keys});
  operands.cache.data = const_cast<uint8_t*>(result.cache.data());
  operands.cache.format = workload.format;
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

// Every inserted key must hold its quantization (spec §3.2 FP8, §3.3 MXFP4) in its cache slot,
// values and scale bytes, and every prefill key (the first workspace rows, in the same order) in
// the gathered workspace. A page holds its keys' values, then their 4 scale bytes each.
std::vector<std::string> check_k_cache(const Workload& workload, const RunResult& result) {
  std::vector<std::string> mismatches;
  int64_t bad_keys = 0;
  const bool mxfp4 = workload.format == KFormat::kMXFP4;
  const int64_t value_bytes = value_bytes_of(workload.format);
  constexpr int64_t kScaleBytes = 4;
  uint8_t expected_values[kHeadDim];
  uint8_t expected_scales[kScaleBytes];
  for (size_t key = 0; key < workload.slot_mapping.size(); ++key) {
    const float* input = workload.keys.data() + key * kHeadDim;
    if (mxfp4) {
      reference::quantize_mxfp4_row(expected_values, expected_scales, input, kHeadDim);
    } else {
      float scale = 0.0f;
      reference::quantize_fp8_row(expected_values, &scale, input, kHeadDim);
      std::memcpy(expected_scales, &scale, kScaleBytes);
    }
    const int64_t slot = workload.slot_mapping[key];
    const uint8_t* page = result.cache.data() + (slot / kPageSize) * workload.page_stride_bytes;
    const uint8_t* cached_values = page + (slot % kPageSize) * value_bytes;
    const uint8_t* cached_scales =
        page + kPageSize * value_bytes + (slot % kPageSize) * kScaleBytes;
    std::string what;
    if (std::memcmp(cached_values, expected_values, value_bytes) != 0 ||
        std::memcmp(cached_scales, expected_scales, kScaleBytes) != 0) {
      what = fmt::format("cache slot {}", slot);
    } else if (static_cast<int64_t>(key) < result.workspace_keys &&
               (std::memcmp(result.workspace_values.data() + key * value_bytes, expected_values,
                            value_bytes) != 0 ||
                std::memcmp(result.workspace_scales.data() + key * kScaleBytes, expected_scales,
                            kScaleBytes) != 0)) {
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

// Every query head of a batch must hold its quantization of its f32 draw in the op's output,
// bit for bit: FP8 (spec §2.3: model eps, the scale folded into the weight) or MXFP4 (§2.4: the
// values and scale bytes, the weight only scaled), the weight scale fp32(1 / sqrt(D * H)).
std::vector<std::string> check_queries(const Workload& workload, size_t batch_index,
                                       const BatchResult& result) {
  const Batch& batch = workload.batches[batch_index];
  const Preset& preset = *workload.preset;
  const bool mxfp4 = workload.format == KFormat::kMXFP4;
  const int64_t value_bytes = value_bytes_of(workload.format);
  const float weight_scale = default_query_weight_scale(kHeadDim, preset.heads);
  const int64_t head_rows = static_cast<int64_t>(batch.weights.size());  // rows * H
  std::vector<std::string> mismatches;
  int64_t bad_heads = 0;
  uint8_t expected_values[kHeadDim];
  uint8_t expected_scales[kMxfp4ScaleBytes];
  for (int64_t i = 0; i < head_rows; ++i) {
    const float* x = batch.q.data() + i * kHeadDim;
    const float expected_weight =
        mxfp4 ? reference::quantize_query_mxfp4_head(expected_values, expected_scales, x, kHeadDim,
                                                     batch.weights[i], weight_scale)
              : reference::quantize_query_fp8_head(expected_values, x, kHeadDim, batch.weights[i],
                                                   preset.query_eps, weight_scale);
    const float got_weight = result.q_weights[i];
    const bool scales_equal = !mxfp4 || std::memcmp(result.q_scales.data() + i * kMxfp4ScaleBytes,
                                                    expected_scales, kMxfp4ScaleBytes) == 0;
    if (std::memcmp(result.q_values.data() + i * value_bytes, expected_values, value_bytes) == 0 &&
        scales_equal && std::memcmp(&got_weight, &expected_weight, sizeof(float)) == 0) {
      continue;
    }
    if (bad_heads++ < kMismatchExamples) {
      mismatches.push_back(fmt::format(
          "{} row {} head {}: quantize_query_{} differs from the reference (weight {} vs {})",
          batch.shape->name, i / preset.heads, i % preset.heads, mxfp4 ? "mxfp4" : "fp8",
          got_weight, expected_weight));
    }
  }
  if (bad_heads > kMismatchExamples) {
    mismatches.push_back(
        fmt::format("{}: {} query heads differ in all", batch.shape->name, bad_heads));
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
    // The CUDA scoring kernel sums the FP8 products (MXFP4: converted to e4m3 exactly) on
    // tensor cores (see score_tolerance).
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

}  // namespace

// The first k entries of a top-k row as a sorted multiset (-1 padding included).
std::vector<int32_t> sorted_row(const std::vector<int32_t>& topk, int64_t row, int k) {
  std::vector<int32_t> set(topk.begin() + row * k, topk.begin() + (row + 1) * k);
  std::sort(set.begin(), set.end());
  return set;
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
    for (std::string& line : check_queries(workload, b, result.batches[b])) {
      mismatches.push_back(std::move(line));
    }
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
  if (workload.preset->candidate_blocks > 0) {
    for (std::string& line : check_candidate_layers(workload, result)) {
      mismatches.push_back(std::move(line));
    }
  }
  return mismatches;
}

}  // namespace flashindexer::cli
