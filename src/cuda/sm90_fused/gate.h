// SPDX-License-Identifier: Apache-2.0
// Internal interface between the fused indexer's host code and its per-row gate kernel
// (gate_kernel.cu), which runs before the scan.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::fused {

// One batch of rows of the fused indexer; row r of the batch is row r of `ranges`.
struct RowState {
  scoring::ScoreParams ranges;  // the scan's parameters: row ranges (ks / ke or context lengths)
  // [rows, sample_stride]: the sampled tiles side by side, or nullptr when no row is gated
  // (then the scan scores every tile).
  const float* sample = nullptr;
  int64_t sample_stride = 0;
  int32_t tile_stride = 1;         // the sample holds key tiles t with t % tile_stride == 0
  float* gate = nullptr;           // [rows] the scan emits keys scoring >= it (NaN: every key)
  uint64_t* candidates = nullptr;  // [rows, capacity] rank keys
  int32_t* counts = nullptr;       // [rows] keys emitted (past the capacity: overflow)
  int32_t capacity = 0;            // candidate slots per row
  int k = 0;
  int32_t* fallback_rows = nullptr;  // [1] zeroed here, counted by the select
  // MXFP4 (format_mxfp4.cuh): a NaN score may mark an out-of-span vector, whose exact score only
  // the fallback's fix-up computes, so a row that meets one takes the fallback (a count past the
  // slots; the scan marks the rows of the NaN scores it meets). nan_falls_back: so does a row
  // with a visible NaN in its sample; keys_flagged (optional, device): every row, when set (the
  // call's preconverted keys hold an out-of-span vector); weights (optional): a row with a NaN
  // among its `heads` weights (an out-of-span query's mark, folded into them), row stride
  // weights_stride.
  bool nan_falls_back = false;
  const int* keys_flagged = nullptr;
  const float* weights = nullptr;
  int heads = 0;
  int64_t weights_stride = 0;
};

// Keys of the sample a row's gate may draw on: sampled tiles of the widest row.
constexpr int kMaxSampleTiles = 128;

// Sets each row's gate: NaN (every key) when the row fits the candidate slots, else a lower bound
// of the sample's rank-r score, with r chosen so that about k (1 + 4 / sqrt(q)) keys pass (q: the
// sample rank of the row's k-th key). Then emits the sampled keys that pass it as the row's
// first candidates (the scan skips the sampled tiles) and sets the counts.
cudaError_t launch_gate(const RowState& state, int64_t rows, bool paged, cudaStream_t stream);

}  // namespace flashindexer::cuda::fused
