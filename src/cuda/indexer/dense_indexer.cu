// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's dense path, over a fixed logits slab: rows run in batches, and each batch is
// the dense pair the op must equal bit for bit -- mqa_logits (paged_mqa_logits) into the slab,
// then topk_per_row over it -- so the result is topk_per_row(logits) by construction, for any
// batch size. The slab is the caller's workspace, so memory never grows with rows or keys; the
// batches follow from shapes only (no host sync, graph-capturable). Host code only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/dense_indexer.h"
#include "cuda/indexer/slab.h"

namespace flashindexer::cuda {
namespace {

Status carve_dense_slab(const char* op, const RunOptions& options, int64_t width, int k,
                        int64_t row_unit, Slab* slab) {
  return carve_slab(
      op, options, width, k, row_unit, 0, 0, [](size_t) { return size_t{0}; }, slab);
}

}  // namespace

Status dense_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, int k, bool sorted,
                             const RunOptions& options) {
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  // Whole scoring groups (4 rows at H = 64, 8 at H = 32) per batch when the slab allows.
  const int64_t group_rows = 256 / q.values.shape[1];
  Slab slab;
  if (Status status = carve_dense_slab("indexer_prefill", options, width, k, 1, &slab);
      !status.ok()) {
    return status;
  }
  const int64_t batch = slab.rows >= group_rows ? slab.rows / group_rows * group_rows : slab.rows;
  for (int64_t first = 0; first < rows; first += batch) {
    const int64_t count = std::min(batch, rows - first);
    const TensorView logits = slab_view(slab, count, width);
    const TensorView batch_ks = leading_rows(ks, first, count);
    const TensorView batch_ke = leading_rows(ke, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count), q.scales};
    if (Status status = mqa_logits(logits, batch_q, keys, leading_rows(weights, first, count),
                                   batch_ks, batch_ke, /*clean=*/false, options.cuda_stream);
        !status.ok()) {
      return status;
    }
    if (Status status =
            topk_per_row(leading_rows(out, first, count), logits,
                         RowRanges::prefill(batch_ks, batch_ke), k, sorted, slab.topk_run);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

Status dense_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                            const PagedKCache& cache, const TensorView& weights,
                            const TensorView& context_lens, const TensorView& block_table, int k,
                            bool sorted, const RunOptions& options) {
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  // Every visible length fits the block table, so its capacity is the logits width.
  const int64_t width = block_table.shape[1] * cache.page_size;
  Slab slab;
  if (Status status = carve_dense_slab("indexer_decode", options, width, k, next_n, &slab);
      !status.ok()) {
    return status;
  }
  const int64_t requests_per_batch = slab.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const TensorView logits = slab_view(slab, count * next_n, width);
    const TensorView batch_lens = leading_rows(context_lens, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count), q.scales};
    if (Status status = paged_mqa_logits(logits, batch_q, cache,
                                         leading_rows(weights, first * next_n, count * next_n),
                                         batch_lens, leading_rows(block_table, first, count),
                                         /*clean=*/false, options.cuda_stream);
        !status.ok()) {
      return status;
    }
    if (Status status =
            topk_per_row(leading_rows(out, first * next_n, count * next_n), logits,
                         RowRanges::decode(batch_lens, next_n), k, sorted, slab.topk_run);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
