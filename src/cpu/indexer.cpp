// SPDX-License-Identifier: Apache-2.0
// CPU indexer: the rows of a block are scored tile by tile with the scoring core of score.h and
// each row keeps an exact streaming top-k (streaming_topk.h), so no row of logits is ever
// materialized. The scores are the same bits mqa_logits / paged_mqa_logits write, and the
// selection is exact, so the result equals topk_per_row of those logits.
#include <omp.h>

#include <algorithm>

#include "cpu/cpu_ops.h"
#include "cpu/scoring/row_blocks.h"
#include "cpu/topk/streaming_topk.h"

namespace flashindexer::cpu {
namespace {

constexpr size_t kWorkspaceAlignment = 64;

// One slot of scratch: the candidate buffers of a row block (kRowBlock buffers of
// streaming_topk_capacity(k) keys) and the number of keys each holds. A thread owns a slot when
// blocks are scored whole; a (block, segment) item owns one when keys are split (row_blocks.h).
struct Slot {
  uint64_t* candidates;
  size_t* sizes;
};

Slot slot_at(void* workspace, int k, int64_t index) {
  char* base = static_cast<char*>(workspace) + index * indexer_thread_workspace_bytes(k);
  auto* candidates = reinterpret_cast<uint64_t*>(base);
  return {candidates,
          reinterpret_cast<size_t*>(candidates + kRowBlock * streaming_topk_capacity(k))};
}

// Scores the block's scored keys and leaves each row's selection (at most k rank keys; sorted
// best first when `sorted`) in the slot.
template <typename Keys>
void select_into(const RowBlock& block, const Keys& keys, int k, bool sorted, Slot slot) {
  StreamingTopK selectors[kRowBlock];
  for (int r = 0; r < block.count; ++r) {
    selectors[r].reset(slot.candidates + r * streaming_topk_capacity(k), k);
  }
  score_row_block(block, keys, [&](int r, int64_t first, const float* scores, int64_t n) {
    selectors[r].push(scores, static_cast<int>(n),
                      static_cast<uint32_t>(first - block.row_start[r]));
  });
  for (int r = 0; r < block.count; ++r) {
    selectors[r].finish(sorted);
    slot.sizes[r] = selectors[r].size();
  }
}

void write_slot(const TensorView& out, int64_t first_row, int rows, Slot slot, int k, bool sorted) {
  for (int r = 0; r < rows; ++r) {
    write_indices(element<int32_t>(out, first_row + r, 0),
                  slot.candidates + r * streaming_topk_capacity(k), slot.sizes[r], k, sorted);
  }
}

// Folds the segments' selections of one block into its first slot (a buffer holds 2k keys, so
// each fold appends at most k to at most k) and writes the rows. Exact: every key of a row's
// top k is in the top k of its own segment.
void merge_segments(const TensorView& out, int64_t first_row, int rows, void* workspace, int k,
                    int64_t first_item, int segments, bool sorted) {
  const Slot merged = slot_at(workspace, k, first_item);
  for (int r = 0; r < rows; ++r) {
    uint64_t* keys = merged.candidates + r * streaming_topk_capacity(k);
    size_t count = merged.sizes[r];
    for (int s = 1; s < segments; ++s) {
      const Slot part = slot_at(workspace, k, first_item + s);
      std::copy_n(part.candidates + r * streaming_topk_capacity(k), part.sizes[r], keys + count);
      count = keep_largest(keys, count + part.sizes[r], k, false);
    }
    merged.sizes[r] = keep_largest(keys, count, k, sorted);
  }
  write_slot(out, first_row, rows, merged, k, sorted);
}

// One (block, segment) item: whole blocks select into the thread's slot and write their rows;
// segments select into the item's own slot, merged by merge_all_segments afterwards.
template <typename Keys>
void select_item(const TensorView& out, const RowBlock& block, int64_t first_row, int64_t item,
                 const Keys& keys, int k, bool sorted, int segments, void* workspace) {
  const Slot slot = slot_at(workspace, k, segments == 1 ? omp_get_thread_num() : item);
  select_into(block, keys, k, sorted && segments == 1, slot);
  if (segments == 1) write_slot(out, first_row, block.count, slot, k, sorted);
}

template <typename Blocks>
void merge_all_segments(const TensorView& out, const Blocks& blocks, void* workspace, int k,
                        int segments, bool sorted, int threads) {
  if (segments == 1) return;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    merge_segments(out, blocks.first_row(b), blocks.size(b), workspace, k, b * segments, segments,
                   sorted);
  }
}

}  // namespace

int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

size_t indexer_thread_workspace_bytes(int k) {
  const size_t bytes = kRowBlock * (streaming_topk_capacity(k) * sizeof(uint64_t) + sizeof(size_t));
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

size_t indexer_slots(int threads) {
  // Whole blocks: one slot per thread. Split keys: one per item, and there are fewer than
  // blocks + threads < 2 * threads items (segments_per_block).
  return 2 * static_cast<size_t>(threads);
}

void indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                     const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                     bool sorted, void* workspace, int threads) {
  const PackedKeys packed(keys);
  const PrefillBlocks blocks{q.values.shape[0]};
  const int segments = segments_per_block(blocks.count(), threads);
  for_each_prefill_block(q, weights, ks, ke, threads, segments,
                         [&](const RowBlock& block, int64_t first_row, int64_t item) {
                           select_item(out, block, first_row, item, packed, k, sorted, segments,
                                       workspace);
                         });
  merge_all_segments(out, blocks, workspace, k, segments, sorted, threads);
}

void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted, void* workspace,
                    int threads) {
  const DecodeBlocks blocks{q.values.shape[0], static_cast<int>(q.values.shape[1])};
  const int segments = segments_per_block(blocks.count(), threads);
  for_each_decode_block(
      q, weights, context_lens, threads, segments,
      [&](const RowBlock& block, int64_t first_row, int64_t request, int64_t item) {
        const PagedKeys paged(cache, element<int32_t>(block_table, request, 0));
        select_item(out, block, first_row, item, paged, k, sorted, segments, workspace);
      });
  merge_all_segments(out, blocks, workspace, k, segments, sorted, threads);
}

}  // namespace flashindexer::cpu
