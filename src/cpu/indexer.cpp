// CPU indexer: the rows of a block are scored tile by tile with the scoring core of score.h and
// each row keeps an exact streaming top-k (streaming_topk.h), so no row of logits is ever
// materialized. The scores are the same bits mqa_logits / paged_mqa_logits write, and the
// selection is exact, so the result equals topk_per_row of those logits.
#include <omp.h>

#include "cpu/cpu_ops.h"
#include "cpu/row_blocks.h"
#include "cpu/streaming_topk.h"

namespace flashindexer::cpu {
namespace {

constexpr size_t kWorkspaceAlignment = 64;

// The candidate buffers of this thread: kRowBlock buffers of streaming_topk_capacity(k) keys.
uint64_t* thread_candidates(void* workspace, int k) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) +
                                     omp_get_thread_num() * indexer_thread_workspace_bytes(k));
}

// Scores the block and writes each row's top-k to out rows first_row + r.
template <typename Keys>
void select_block(const TensorView& out, int64_t first_row, const RowBlock& block,
                  const Keys& keys, int k, bool sorted, uint64_t* candidates) {
  StreamingTopK selectors[kRowBlock];
  for (int r = 0; r < block.count; ++r) {
    selectors[r].reset(candidates + r * streaming_topk_capacity(k), k);
  }
  score_row_block(block, keys, [&](int r, int64_t first, const float* scores, int64_t n) {
    selectors[r].push(scores, static_cast<int>(n), static_cast<uint32_t>(first - block.start[r]));
  });
  for (int r = 0; r < block.count; ++r) {
    selectors[r].finish(sorted);
    write_indices(element<int32_t>(out, first_row + r, 0), selectors[r].keys(),
                  selectors[r].size(), k);
  }
}

}  // namespace

int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

size_t indexer_thread_workspace_bytes(int k) {
  const size_t bytes = kRowBlock * streaming_topk_capacity(k) * sizeof(uint64_t);
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

void indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                     const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                     bool sorted, void* workspace, int threads) {
  const PrefillBlocks blocks{out.shape[0]};
  const PackedKeys packed(keys);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_prefill_block(block, rows, blocks, b, q, weights, ks, ke);
    select_block(out, blocks.first_row(b), block, packed, k, sorted,
                 thread_candidates(workspace, k));
  }
}

void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted, void* workspace,
                    int threads) {
  const DecodeBlocks blocks{q.values.shape[0], static_cast<int>(q.values.shape[1])};
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t b = 0; b < blocks.count(); ++b) {
    QueryRow rows[kRowBlock];
    RowBlock block;
    load_decode_block(block, rows, blocks, b, q, weights, context_lens);
    const PagedKeys paged(cache, element<int32_t>(block_table, blocks.request(b), 0));
    select_block(out, blocks.first_row(b), block, paged, k, sorted,
                 thread_candidates(workspace, k));
  }
}

}  // namespace flashindexer::cpu
