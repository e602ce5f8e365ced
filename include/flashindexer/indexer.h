// The indexer: scoring and selection in one call, without the [rows, keys] logits in memory.
//
// indexer_prefill == topk_per_row(mqa_logits(...)) and indexer_decode ==
// topk_per_row(paged_mqa_logits(...)) exactly, bit for bit (best first when sorted, ascending
// index order when not), on every backend: the scores are computed with the arithmetic of the
// backend's logits op.
//
// CUDA tensors (FP8, H 32/64, D 128, as the CUDA logits ops): the rows run in batches whose
// logits live in RunOptions::workspace, which is required (indexer_cuda_workspace_size(k) bytes
// is the recommended size; any size holding the top-k scratch plus one batch of rows works, and
// a larger one means fewer batches). The memory is therefore fixed, whatever the rows and keys;
// the call is asynchronous on the stream, never synchronizes and can be captured in a graph.
#pragma once

#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer {

// out: [M, >= k] i32 (out); the other arguments as mqa_logits.
Status indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights,
                       const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options = {}, const RunOptions& options = {});

// out: [B * next_n, >= k] i32 (out); the other arguments as paged_mqa_logits.
Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options = {},
                      const RunOptions& options = {});

// Bytes of caller workspace (RunOptions::workspace) indexer_prefill / indexer_decode use on the
// CPU at `k` with `threads` CPU threads (0 = the OpenMP default); independent of rows and keys.
size_t indexer_cpu_workspace_size(int k, int threads = 0);

// A prefill chunk whose packed keys number at least kSeveralRequestsRatio times the keys its
// shortest row sees holds several requests: the dense path's logits rows span all the chunk's
// keys (its slab takes fewer rows per batch), the fused path's work only what the rows see. Two
// requests already put the fused path level or ahead at the lower thresholds below (measured
// with 2, 3, 4 and 8 requests per chunk); one causal request of at most 16384 rows never reaches
// the ratio with its shortest row at those thresholds (it would need rows for half its keys).
constexpr int64_t kSeveralRequestsRatio = 2;

// The fewest keys every row must see (RunOptions::min_row_keys) for kAuto to take the fused path
// at k <= kFusedMaxAutoK: 28672 at k <= 512, 36864 at k <= 1024, 45056 up to 2048; in a chunk of
// several requests 17408, 23552 and 34816. Measured interleaved with the dense path at H = 32 and
// 64, the fused path is level or ahead on every chunk whose rows see that many keys or more, and
// behind on most with shorter rows; the smaller k is, the less its select costs and the earlier
// it wins (docs/benchmarks.md, "Which path for which rows, by k").
constexpr int64_t fused_min_row_keys(int k, bool several_requests = false) {
  if (several_requests) return k <= 512 ? 17408 : k <= 1024 ? 23552 : 34816;
  return k <= 512 ? 28672 : k <= 1024 ? 36864 : 45056;
}
constexpr int kFusedMaxAutoK = 2048;
// Rows that see this many keys take the fused path under kAuto at every k <= kFusedMaxAutoK.
constexpr int64_t kFusedMinRowKeys = fused_min_row_keys(kFusedMaxAutoK);

// The path indexer_prefill takes on CUDA tensors with these options at `k`, over a chunk of
// `num_keys` packed keys (keys.shape[0]; 0: unknown, taken as one request): options.indexer_path
// unless it is kAuto; kAuto is kFused when k <= kFusedMaxAutoK and options.min_row_keys >=
// fused_min_row_keys(k, several), several = (min_row_keys > 0 and num_keys >=
// kSeveralRequestsRatio x min_row_keys), else kDense. indexer_decode's kAuto is always kDense
// (docs/design.md).
IndexerPath cuda_prefill_path(int k, const RunOptions& options, int64_t num_keys = 0);

// Recommended bytes of RunOptions::workspace for indexer_prefill / indexer_decode on CUDA tensors
// at `k` on the current device: the top-k scratch plus a 256 MiB logits slab (512 rows of 128K
// keys per batch). Independent of rows and keys; 0 in a build without CUDA.
size_t indexer_cuda_workspace_size(int k);

}  // namespace flashindexer
