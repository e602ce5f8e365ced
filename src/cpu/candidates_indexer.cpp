// SPDX-License-Identifier: Apache-2.0
// The CPU indexer of a consumer layer (IndexerOptions::candidates), equal to
// candidate_topk_per_row(mqa_logits(...)) bit for bit in both forms:
//  * exact: each row scores only the keys of its candidate blocks, with the scoring core that
//    writes the CPU logits (score_tile: a score depends on its key and row alone, not on the
//    tile around it), and offers them to the same selector, position by position in ascending
//    order, as the consumer over dense logits does: O(C cb) keys a row, not O(context);
//  * vLLM-compatible: rows run in batches whose logits the CPU logits ops write, then the
//    consumer's selection over them (it fills from masked positions outside the blocks).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/access.h"
#include "core/rows.h"
#include "cpu/candidates.h"
#include "cpu/cpu_ops.h"
#include "cpu/scoring/score.h"
#include "cpu/topk/select.h"
#include "cpu/topk/streaming_topk.h"

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

// Per-thread scratch of the exact form: the dequantized query row and key tile are large.
struct SparseScratch {
  QueryRow row;
  KeyTile tile;
  alignas(64) float scores[kKeyTile];
};

// The exact consumer of one row: scores the positions of its kept blocks (position p is key
// vis.start + p of `keys`, a PackedKeys or PagedKeys) and selects among them.
template <typename Keys>
void sparse_select_row(int32_t* out, const Keys& keys, const Visible& vis,
                       const int32_t* row_candidates, const CandidateInput& input, int k,
                       bool sorted, SparseScratch& scratch, std::vector<int64_t>& blocks,
                       uint64_t* buffer) {
  const int block_size = input.block_size;
  const int64_t row_blocks = (vis.count + block_size - 1) / block_size;
  kept_blocks(blocks, row_candidates, input.blocks.stride[1], input.blocks.shape[1], row_blocks);
  StreamingTopK selector;
  selector.reset(buffer, k);
  for (const int64_t block : blocks) {
    const int64_t last = std::min<int64_t>((block + 1) * block_size, vis.count);
    for (int64_t at = block * block_size; at < last; at += kKeyTile) {
      const int n = static_cast<int>(std::min<int64_t>(kKeyTile, last - at));
      load_key_tile(scratch.tile, keys, vis.start + at, n, scratch.row.head_dim);
      score_tile(scratch.scores, scratch.row, scratch.tile);
      selector.push(scratch.scores, n, static_cast<uint32_t>(at));
    }
  }
  selector.finish(sorted);
  write_indices(out, selector.keys(), selector.size(), k, sorted);
}

// The exact form over rows [0, rows) on the OpenMP threads: prepare(r, row) loads query row r
// into `row` and returns the keys its positions address (PackedKeys or PagedKeys).
template <typename Prepare>
void sparse_consumer(const TensorView& out, int64_t rows, const std::vector<RowBound>& bounds,
                     int64_t width, const CandidateInput& candidates, int k, bool sorted,
                     int threads, Prepare&& prepare) {
#pragma omp parallel num_threads(threads)
  {
    auto scratch = std::make_unique<SparseScratch>();
    std::vector<int64_t> blocks;
    std::vector<uint64_t> buffer(streaming_topk_capacity(k));
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      const auto keys = prepare(r, scratch->row);
      sparse_select_row(element<int32_t>(out, r, 0), keys, visible_of(bounds[r], width),
                        element<int32_t>(candidates.blocks, r, 0), candidates, k, sorted, *scratch,
                        blocks, buffer.data());
    }
  }
}

}  // namespace

void candidate_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                               const QuantizedTensor& keys, const TensorView& weights,
                               const TensorView& ks, const TensorView& ke, int k, bool sorted,
                               const CandidateInput& candidates, int threads) {
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  const std::vector<RowBound> bounds = candidate_row_bounds(CandidateRows::prefill(ks, ke), rows);
  if (!candidates.vllm_compatible) {
    sparse_consumer(out, rows, bounds, width, candidates, k, sorted, threads,
                    [&](int64_t t, QueryRow& row) {
                      load_query_row(row, q, t, 0, weights, t);
                      return PackedKeys(keys);
                    });
    return;
  }
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
  if (!candidates.vllm_compatible) {
    sparse_consumer(out, rows, bounds, width, candidates, k, sorted, threads,
                    [&](int64_t r, QueryRow& row) {
                      load_query_row(row, q, r / next_n, r % next_n, weights, r);
                      return PagedKeys(cache, element<int32_t>(block_table, r / next_n, 0));
                    });
    return;
  }
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
