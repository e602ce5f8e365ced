// CPU indexer: per query row, score the visible keys tile by tile with the scoring core of
// score.h and keep a running exact top-k, so no row of logits is ever materialized.
//
// Streaming selection: candidates (rank keys) are appended to a buffer of 2k + kScoreTile
// entries; when it holds 2k or more, nth_element keeps the k best and their smallest key becomes
// a threshold. A key below the threshold has k better keys already, so it is dropped at once.
// Keys are distinct, so this returns exactly the set topk_per_row returns on the same scores.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/decode_rows.h"
#include "cpu/score.h"
#include "cpu/select.h"

namespace flashindexer::cpu {
namespace {

constexpr int kScoreTile = 256;  // keys scored between two candidate appends
constexpr size_t kWorkspaceAlignment = 64;

size_t align_up(size_t bytes) {
  return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
}

// Selects the top k of one row's visible keys [0, visible) into out_row[0, k).
template <typename Keys>
void select_row(int32_t* out_row, const QueryRow& row, const Keys& keys, int64_t first,
                int64_t visible, int k, bool sorted, uint64_t* candidates) {
  float scores[kScoreTile];
  const size_t prune_at = 2 * static_cast<size_t>(k);
  size_t count = 0;
  uint64_t threshold = 0;  // every key of a kept candidate is above it (0 = no threshold yet)
  for (int64_t begin = 0; begin < visible; begin += kScoreTile) {
    const int n = static_cast<int>(std::min<int64_t>(kScoreTile, visible - begin));
    score_keys(scores, row, keys, first + begin, n);
    for (int i = 0; i < n; ++i) {
      const uint64_t key = rank_key(scores[i], static_cast<uint32_t>(begin + i));
      if (key > threshold) candidates[count++] = key;
    }
    if (count >= prune_at) {
      count = keep_largest(candidates, count, k, false);
      threshold = *std::min_element(candidates, candidates + count);
    }
  }
  count = keep_largest(candidates, count, k, sorted);
  write_indices(out_row, candidates, count, k);
}

uint64_t* thread_candidates(void* workspace, int k) {
  return reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) +
                                     omp_get_thread_num() * indexer_thread_workspace_bytes(k));
}

}  // namespace

int resolve_threads(int requested) { return requested > 0 ? requested : omp_get_max_threads(); }

size_t indexer_thread_workspace_bytes(int k) {
  return align_up((2 * static_cast<size_t>(k) + kScoreTile) * sizeof(uint64_t));
}

void indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                     const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                     bool sorted, void* workspace, int threads) {
  const int64_t rows = out.shape[0];
  const PackedKeys packed(keys);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < rows; ++t) {
    QueryRow row;
    load_query_row(row, q, t, 0, weights, t);
    const int64_t start = *element<int32_t>(ks, t);
    const int64_t end = *element<int32_t>(ke, t);
    select_row(element<int32_t>(out, t, 0), row, packed, start, end - start, k, sorted,
               thread_candidates(workspace, k));
  }
}

void indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                    const TensorView& weights, const TensorView& context_lens,
                    const TensorView& block_table, int k, bool sorted, void* workspace,
                    int threads) {
  const int64_t rows = out.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    QueryRow row;
    load_query_row(row, q, r / next_n, r % next_n, weights, r);
    const PagedKeys paged(cache, element<int32_t>(block_table, r / next_n, 0));
    select_row(element<int32_t>(out, r, 0), row, paged, 0, decode_row_end(context_lens, next_n, r),
               k, sorted, thread_candidates(workspace, k));
  }
}

}  // namespace flashindexer::cpu
