// SPDX-License-Identifier: Apache-2.0
// The steps of `flashindexer run` (run.h), in three files:
//   execute.cpp  builds the K cache, quantizes the queries and scores the workload's batches on
//                the chosen device (insert and gather, quantize_query_fp8 or _mxfp4, dense
//                logits + top-k, and the indexer), timing each op;
//   verify.cpp   checks on the host
//                1. the K cache and the gathered workspace against the reference quantizer, and
//                   the quantized queries and folded weights against the query oracle,
//                2. indexer_* == topk_per_row(*mqa_logits) as sets on every row (a library
//                   contract),
//                3. a sample of rows against the reference oracle: every visible logit within
//                   the derived tolerance (fp32 rounding, plus the FP8 tensor cores'
//                   accumulation on CUDA: reference::score_tolerance), and the reference top-k
//                   of the backend's logits == the indexer's set;
//   report.cpp   prints the shapes, the timings, a few rows' selections and the verdict, and
//                holds run_command, which drives the steps.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/workload.h"
#include "flashindexer/flashindexer.h"

namespace flashindexer::cli {

// What one batch's ops wrote, downloaded to the host, and how long each took.
struct BatchResult {
  // The query quantizer's output, which every scoring call of the batch read: FP8 values
  // [rows, H, D] e4m3 and weights (w * sigma) * D^-1/2 * H^-1/2; MXFP4 values [rows, H, D/2]
  // e2m1x2, scales [rows, H, D/32] ue8m0 and weights w * D^-1/2 * H^-1/2.
  std::vector<uint8_t> q_values;
  std::vector<uint8_t> q_scales;  // MXFP4 only
  std::vector<float> q_weights;   // [rows, H] f32
  double quantize_ms = 0.0;
  std::vector<int32_t> indexer_topk;  // [rows, k] i32 from indexer_prefill / indexer_decode
  std::vector<int32_t> dense_topk;    // [rows, k] i32 topk_per_row over `logits`
  std::vector<float> logits;          // [rows, logits_row_stride] f32, clean (-inf outside)
  int64_t logits_row_stride = 0;
  double indexer_ms = 0.0;
  double logits_ms = 0.0;
  double topk_ms = 0.0;
  // Presets with candidates (candidates_step.cpp): the source layer's indexer call with a
  // candidate output, its own top-k [rows, k] i32 and its blocks [rows, C] i32, and the consumer
  // layer's indexer output [rows, k] i32 restricted to them.
  std::vector<int32_t> source_topk;
  std::vector<int32_t> candidates;
  std::vector<int32_t> consumer_topk;
  double source_ms = 0.0;
  double consumer_ms = 0.0;
};

struct RunResult {
  Device device = Device::kCPU;  // where the cache was built and the batches scored
  std::vector<uint8_t> cache;    // [num_pages, page_stride_bytes] u8 after the insert
  // The gathered workspace: values [Nws, D] e4m3 or [Nws, D/2] e2m1x2, and 4 scale bytes a key
  // (one f32, or D/32 = 4 ue8m0).
  int64_t workspace_keys = 0;
  std::vector<uint8_t> workspace_values;
  std::vector<uint8_t> workspace_scales;
  double insert_ms = 0.0;
  double gather_ms = 0.0;
  std::vector<BatchResult> batches;  // parallel to Workload::batches
};

// Builds the key store and scores every batch on `device`, and copies what the checks read back
// to the host.
Status execute(RunResult* result, const Workload& workload, Device device);

// Rows checked against the reference oracle, per phase.
struct Verified {
  int64_t prefill_rows = 0;
  int64_t decode_rows = 0;
};

// Every check on the results; returns one line per mismatch. `verify_rows` rows per phase go
// to the oracle: all of the prefill chunk's, an even share of them to each decode batch.
std::vector<std::string> check_all(Verified* verified, const Workload& workload,
                                   const RunResult& result, int verify_rows);

// The two-level layers of a preset with candidates, on one batch: the source layer (the indexer
// with a candidate output, IndexerOptions::candidate_source: its own top-k and the blocks, no
// logits of its own), then the indexer with those candidates (the consumer, the dense route on
// CUDA). `run_indexer(options, out)` runs the batch's indexer call with the given options.
class DeviceMemory;
Status run_candidate_layers(
    BatchResult* result, DeviceMemory& memory, const Batch& batch, const Preset& preset,
    const std::function<Status(const IndexerOptions&, const TensorView&)>& run_indexer);

// Every row of every batch of a preset with candidates against the reference (candidates.h's
// oracle) over the backend's own logits: the source's blocks bit for bit, its own top-k as the
// plain top-k of the logits, the consumer's selection as a set. One line per mismatch.
std::vector<std::string> check_candidate_layers(const Workload& workload, const RunResult& result);

// The first k entries of a top-k row as a sorted multiset (-1 padding included).
std::vector<int32_t> sorted_row(const std::vector<int32_t>& topk, int64_t row, int k);

// Up to `count` rows spread over the requests, the tie-heavy (repeated prompt) requests
// first, in round-robin order so that the first few rows come from different requests.
std::vector<int64_t> sample_rows(const Batch& batch, int count);

}  // namespace flashindexer::cli
