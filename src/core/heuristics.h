// SPDX-License-Identifier: Apache-2.0
// Every measured host decision of the library, one function each, with its reason. Internal:
// nothing here is public API (the public query is cuda_prefill_path() in indexer.h). A rule
// that cost a measurement has its record under docs/decisions/.
//
// Launch geometry that is part of a kernel's design (tile sizes, the top-k's splits per row,
// the fused gate's sampling stride) stays in that kernel folder's config.h / launch code: it
// follows from the kernel's shared-memory and register budget, not from a crossover measured
// between two paths.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flashindexer::heuristics {

// A prefill chunk whose packed keys number at least this many times the keys its shortest row
// sees holds several requests: the dense path's logits rows span all the chunk's keys (its slab
// takes fewer rows per batch), the fused path's work only what the rows see. Two requests
// already put the fused path level or ahead at the lower thresholds of fused_min_row_keys
// (measured with 2, 3, 4 and 8 requests per chunk); one causal request of at most 16384 rows
// never reaches the ratio with its shortest row at those thresholds.
constexpr int64_t kSeveralRequestsRatio = 2;

constexpr bool several_requests(int64_t num_keys, int64_t min_row_keys) {
  return min_row_keys > 0 && num_keys / kSeveralRequestsRatio >= min_row_keys;
}

// The largest k for which the automatic choice ever takes the fused path: above it the fused
// select's candidate slots (fused_candidate_capacity) are twice as many and the dense path was
// ahead on every measured shape.
constexpr int kFusedMaxAutoK = 2048;

// The fewest keys every row must see for the automatic choice to take the fused path at
// k <= kFusedMaxAutoK. Measured interleaved with the dense path at H = 32 and 64, the fused path
// is level or ahead on every chunk whose rows see that many keys or more, and behind on most
// with shorter rows; the smaller k is, the less its select costs and the earlier it wins
// (docs/decisions/prefill-path-thresholds.md).
constexpr int64_t fused_min_row_keys(int k, bool several_requests) {
  if (several_requests) return k <= 512 ? 17408 : k <= 1024 ? 23552 : 34816;
  return k <= 512 ? 28672 : k <= 1024 ? 36864 : 45056;
}

// Prefill on CUDA under IndexerPath::kAuto: fused when the rows are known to be long enough
// (min_row_keys, 0 = unknown), dense otherwise. A call's shape gives its chunk's packed keys,
// never what a row sees, so without the caller's min_row_keys the answer is dense.
constexpr bool prefill_takes_fused(int k, int64_t min_row_keys, int64_t num_keys) {
  return k <= kFusedMaxAutoK &&
         min_row_keys >= fused_min_row_keys(k, several_requests(num_keys, min_row_keys));
}

// Candidate slots per row of the fused indexer. The gate lets about k r / q keys through
// (r = q + 4 sqrt(q) + 8, q the sample rank of the k-th key): 1.6k at q = 64 (k = 2048, 128K
// keys), 2.5k at q = 16, 5k at q = 4 (k = 512, 1M keys); the merge kernel holds at most 16384
// rank keys per row.
constexpr int fused_candidate_capacity(int k) { return k <= 2048 ? 8192 : 16384; }

// The logits slab of indexer_cuda_workspace_size(): 256 MiB holds 512 rows of 128K keys per
// batch, enough that batching costs nothing measurable at 128K keys while staying a fixed,
// small share of an H200's memory.
constexpr size_t kDefaultSlabBytes = size_t{256} << 20;

}  // namespace flashindexer::heuristics
