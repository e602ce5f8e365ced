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
  const PackedKeys packed(keys);
  for_each_prefill_block(q, weights, ks, ke, threads, [&](const RowBlock& block, int64_t first_row) {
    select_block(out, first_row, block, packed, k, sorted, thread_candidates(workspace, k));
  });
}

void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted, void* workspace,
                    int threads) {
  for_each_decode_block(q, weights, context_lens, threads,
                        [&](const RowBlock& block, int64_t first_row, int64_t request) {
    const PagedKeys paged(cache, element<int32_t>(block_table, request, 0));
    select_block(out, first_row, block, paged, k, sorted, thread_candidates(workspace, k));
  });
}

}  // namespace flashindexer::cpu
