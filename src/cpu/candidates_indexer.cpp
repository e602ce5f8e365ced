// SPDX-License-Identifier: Apache-2.0
// The CPU indexer of a consumer layer (IndexerOptions::candidates): rows run in batches whose
// logits the CPU logits ops write (the very bits the CPU indexer scores with), then the consumer's
// selection runs over them. Equal to candidate_topk_per_row(mqa_logits(...)) by construction.
#include <algorithm>
#include <vector>

#include "core/rows.h"
#include "cpu/candidates.h"
#include "cpu/cpu_ops.h"

namespace flashindexer::cpu {
namespace {

// Logits of one batch stay within this many floats (64 MiB), whatever the row width.
constexpr int64_t kBatchFloats = int64_t{16} << 20;

TensorView row_slice(const TensorView& view, int64_t first, int64_t count) {
  if (!view.defined()) return view;
  TensorView part = view;
  part.data = static_cast<unsigned char*>(view.data) +
              first * view.stride[0] * static_cast<int64_t>(dtype_size(view.dtype));
  part.shape[0] = count;
  return part;
}

int64_t rows_per_batch(int64_t width, int64_t unit) {
  const int64_t fit = std::max<int64_t>(kBatchFloats / std::max<int64_t>(width, 1), 1);
  return std::max<int64_t>(fit / unit, 1) * unit;
}

void select_batch(const TensorView& out, const TensorView& logits,
                  const std::vector<RowBound>& bounds, const CandidateInput& candidates,
                  int64_t first, int64_t count, int k, bool sorted, int threads) {
  const std::vector<RowBound> batch_bounds(bounds.begin() + first, bounds.begin() + first + count);
  candidate_topk_per_row(row_slice(out, first, count), logits, batch_bounds,
                         row_slice(candidates.blocks, first, count), candidates.block_size, k,
                         sorted, candidates.vllm_compatible, threads);
}

}  // namespace

void candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                               const QuantizedTensor& keys, const TensorView& weights,
                               const TensorView& ks, const TensorView& ke, int k, bool sorted,
                               const CandidateInput& candidates, int threads) {
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  const std::vector<RowBound> bounds = candidate_row_bounds(CandidateRows::prefill(ks, ke), rows);
  const int64_t batch = std::min(rows_per_batch(width, 1), std::max<int64_t>(rows, 1));
  std::vector<float> storage(static_cast<size_t>(batch * std::max<int64_t>(width, 1)));
  for (int64_t first = 0; first < rows; first += batch) {
    const int64_t count = std::min(batch, rows - first);
    const TensorView logits = TensorView::contiguous(storage.data(), DType::kF32, {count, width});
    const QuantizedTensor batch_q{row_slice(q.values, first, count),
                                  row_slice(q.scales, first, count)};
    mqa_logits(logits, batch_q, keys, row_slice(weights, first, count), row_slice(ks, first, count),
               row_slice(ke, first, count), /*clean=*/false, threads);
    select_batch(out, logits, bounds, candidates, first, count, k, sorted, threads);
  }
}

void candidate_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                              const PagedKCache& cache, const TensorView& weights,
                              const TensorView& context_lens, const TensorView& block_table, int k,
                              bool sorted, const CandidateInput& candidates, int threads) {
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  const int64_t rows = batch_size * next_n;
  const int64_t width = block_table.shape[1] * cache.page_size;
  std::vector<RowBound> bounds(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) bounds[r] = {0, rows::decode_row_end(context_lens, next_n, r)};
  const int64_t requests =
      std::min(rows_per_batch(width, next_n) / next_n, std::max<int64_t>(batch_size, 1));
  std::vector<float> storage(static_cast<size_t>(requests * next_n * std::max<int64_t>(width, 1)));
  for (int64_t first = 0; first < batch_size; first += requests) {
    const int64_t count = std::min(requests, batch_size - first);
    const TensorView logits =
        TensorView::contiguous(storage.data(), DType::kF32, {count * next_n, width});
    const QuantizedTensor batch_q{row_slice(q.values, first, count),
                                  row_slice(q.scales, first, count)};
    paged_mqa_logits(logits, batch_q, cache, row_slice(weights, first * next_n, count * next_n),
                     row_slice(context_lens, first, count), row_slice(block_table, first, count),
                     /*clean=*/false, threads);
    select_batch(out, logits, bounds, candidates, first * next_n, count * next_n, k, sorted,
                 threads);
  }
}

}  // namespace flashindexer::cpu
