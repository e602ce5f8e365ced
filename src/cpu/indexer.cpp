// SPDX-License-Identifier: Apache-2.0
// CPU indexer: the rows of a block are scored tile by tile with the scoring core of score.h and
// each row keeps an exact streaming top-k (streaming_topk.h), so no row of logits is ever
// materialized. The scores are the same bits mqa_logits / paged_mqa_logits write, and the
// selection is exact, so the result equals topk_per_row of those logits.
//
// A candidate output (a V4.1 source layer) keeps, beside each row's selection, the running max
// of each of its blocks over the same scores as they stream past (NaN read as +inf, the block
// order's rule), and turns them into the row's blocks as select_candidate_blocks does
// (select_row_blocks): the same blocks as over the logits, with ceil(keys / cb) floats a row of
// the slot instead of a row of logits. Key segments keep their own maxima, merged by max.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/candidates.h"
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

// The candidate output's block maxima: `slots` slots of kRowBlock rows of `stride` floats
// (stride = the most blocks a row can have), empty when there is no candidate output.
class BlockMaxima {
 public:
  BlockMaxima(const CandidateOutput& source, int64_t width, size_t slots)
      : block_size_(source.defined() ? source.block_size : 0),
        num_blocks_(source.defined() ? static_cast<int>(source.blocks.shape[1]) : 0),
        stride_(source.defined() ? (width + block_size_ - 1) / block_size_ : 0),
        values_(static_cast<size_t>(stride_) * kRowBlock * (source.defined() ? slots : 0)),
        counts_(source.defined() ? slots * kRowBlock : 0) {}
  bool enabled() const { return block_size_ > 0; }
  float* row(int64_t slot, int r) {
    return values_.data() + (static_cast<size_t>(slot) * kRowBlock + r) * stride_;
  }
  int64_t count(int64_t slot, int r) const { return counts_[slot * kRowBlock + r]; }
  // Starts the row's maxima: ceil(visible / cb) blocks, all -inf.
  void begin(int64_t slot, int r, int64_t visible) {
    const int64_t blocks = (visible + block_size_ - 1) / block_size_;
    counts_[slot * kRowBlock + r] = blocks;
    std::fill_n(row(slot, r), blocks, -std::numeric_limits<float>::infinity());
  }
  // Folds another slot's maxima of the same row into this slot's (a key segment's part).
  void merge(int64_t slot, int64_t from, int r) {
    float* into = row(slot, r);
    const float* part = row(from, r);
    for (int64_t b = 0; b < count(slot, r); ++b) into[b] = part[b] > into[b] ? part[b] : into[b];
  }
  // The row's candidate blocks (select_candidate_blocks' rule) into out_row.
  void write(int64_t slot, int r, int32_t* out_row, int64_t out_stride,
             std::vector<uint64_t>& keys) {
    select_row_blocks(out_row, out_stride, row(slot, r), count(slot, r), num_blocks_, keys);
  }
  // Folds scores of positions [position, position + n) into the row's maxima.
  void fold(float* maxima, int64_t position, const float* scores, int64_t n) const {
    int64_t b = position / block_size_;
    int64_t in_block = position - b * block_size_;
    for (int64_t i = 0; i < n; ++i) {
      const float x = std::isnan(scores[i]) ? std::numeric_limits<float>::infinity() : scores[i];
      maxima[b] = x > maxima[b] ? x : maxima[b];
      if (++in_block == block_size_) {
        ++b;
        in_block = 0;
      }
    }
  }

 private:
  int block_size_;
  int num_blocks_;
  int64_t stride_;
  std::vector<float> values_;
  std::vector<int64_t> counts_;
};

// Scores the block's scored keys and leaves each row's selection (at most k rank keys; sorted
// best first when `sorted`) in the slot, and its block maxima in the slot's rows of `maxima`
// when enabled.
template <typename Keys>
void select_into(const RowBlock& block, const Keys& keys, int k, bool sorted, Slot slot,
                 BlockMaxima& maxima, int64_t slot_index) {
  StreamingTopK selectors[kRowBlock];
  for (int r = 0; r < block.count; ++r) {
    selectors[r].reset(slot.candidates + r * streaming_topk_capacity(k), k);
    if (maxima.enabled()) maxima.begin(slot_index, r, block.row_end[r] - block.row_start[r]);
  }
  score_row_block(block, keys, [&](int r, int64_t first, const float* scores, int64_t n) {
    selectors[r].push(scores, static_cast<int>(n),
                      static_cast<uint32_t>(first - block.row_start[r]));
    if (maxima.enabled()) {
      maxima.fold(maxima.row(slot_index, r), first - block.row_start[r], scores, n);
    }
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

// The candidate blocks of `rows` rows from first_row on, from their maxima in slot `slot_index`.
void write_blocks(const CandidateOutput& source, BlockMaxima& maxima, int64_t slot_index,
                  int64_t first_row, int rows) {
  if (!maxima.enabled()) return;
  std::vector<uint64_t> keys;
  for (int r = 0; r < rows; ++r) {
    maxima.write(slot_index, r, element<int32_t>(source.blocks, first_row + r, 0),
                 source.blocks.stride[1], keys);
  }
}

// Folds the segments' selections of one block into its first slot (a buffer holds 2k keys, so
// each fold appends at most k to at most k) and writes the rows. Exact: every key of a row's
// top k is in the top k of its own segment.
void merge_segments(const TensorView& out, const CandidateOutput& source, BlockMaxima& maxima,
                    int64_t first_row, int rows, void* workspace, int k, int64_t first_item,
                    int segments, bool sorted) {
  const Slot merged = slot_at(workspace, k, first_item);
  for (int r = 0; r < rows; ++r) {
    if (maxima.enabled()) {
      for (int s = 1; s < segments; ++s) maxima.merge(first_item, first_item + s, r);
    }
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
  write_blocks(source, maxima, first_item, first_row, rows);
}

// One (block, segment) item: whole blocks select into the thread's slot and write their rows;
// segments select into the item's own slot, merged by merge_all_segments afterwards.
template <typename Keys>
void select_item(const TensorView& out, const CandidateOutput& source, BlockMaxima& maxima,
                 const RowBlock& block, int64_t first_row, int64_t item, const Keys& keys, int k,
                 bool sorted, int segments, void* workspace) {
  const int64_t slot_index = segments == 1 ? omp_get_thread_num() : item;
  const Slot slot = slot_at(workspace, k, slot_index);
  select_into(block, keys, k, sorted && segments == 1, slot, maxima, slot_index);
  if (segments == 1) {
    write_slot(out, first_row, block.count, slot, k, sorted);
    write_blocks(source, maxima, slot_index, first_row, block.count);
  }
}

template <typename Blocks>
void merge_all_segments(const TensorView& out, const CandidateOutput& source, BlockMaxima& maxima,
                        const Blocks& blocks, void* workspace, int k, int segments, bool sorted,
                        int threads) {
  if (segments == 1) return;
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    merge_segments(out, source, maxima, blocks.first_row(b), blocks.size(b), workspace, k,
                   b * segments, segments, sorted);
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
                     bool sorted, const CandidateOutput& source, void* workspace, int threads) {
  const PackedKeys packed(keys);
  const PrefillBlocks blocks{q.values.shape[0]};
  const int segments = segments_per_block(blocks.count(), threads);
  BlockMaxima maxima(source, keys.values.shape[0], indexer_slots(threads));
  for_each_prefill_block(q, weights, ks, ke, threads, segments,
                         [&](const RowBlock& block, int64_t first_row, int64_t item) {
                           select_item(out, source, maxima, block, first_row, item, packed, k,
                                       sorted, segments, workspace);
                         });
  merge_all_segments(out, source, maxima, blocks, workspace, k, segments, sorted, threads);
}

void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted,
                    const CandidateOutput& source, void* workspace, int threads) {
  const DecodeBlocks blocks{q.values.shape[0], static_cast<int>(q.values.shape[1])};
  const int segments = segments_per_block(blocks.count(), threads);
  BlockMaxima maxima(source, block_table.shape[1] * cache.page_size, indexer_slots(threads));
  for_each_decode_block(
      q, weights, context_lens, threads, segments,
      [&](const RowBlock& block, int64_t first_row, int64_t request, int64_t item) {
        const PagedKeys paged(cache, element<int32_t>(block_table, request, 0));
        select_item(out, source, maxima, block, first_row, item, paged, k, sorted, segments,
                    workspace);
      });
  merge_all_segments(out, source, maxima, blocks, workspace, k, segments, sorted, threads);
}

}  // namespace flashindexer::cpu
