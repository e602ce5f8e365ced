// CPU scoring ops: one OpenMP task per query row, keys in tiles (see score.h).
#include <limits>

#include "cpu/cpu_ops.h"
#include "cpu/decode_rows.h"
#include "cpu/score.h"

namespace flashindexer::cpu {
namespace {

void fill_outside(float* row, int64_t width, int64_t start, int64_t end) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  for (int64_t s = 0; s < std::min(start, width); ++s) row[s] = kMinusInf;
  for (int64_t s = std::max<int64_t>(end, 0); s < width; ++s) row[s] = kMinusInf;
}

}  // namespace

void mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean,
                int threads) {
  const int64_t rows = logits.shape[0];
  const int64_t width = logits.shape[1];
  const PackedKeys packed(keys);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t t = 0; t < rows; ++t) {
    QueryRow row;
    load_query_row(row, q, t, 0, weights, t);
    const int64_t start = *element<int32_t>(ks, t);
    const int64_t end = *element<int32_t>(ke, t);
    float* out = element<float>(logits, t, 0);
    score_keys(out + start, row, packed, start, end - start);
    if (clean) fill_outside(out, width, start, end);
  }
}

void paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, bool clean, int threads) {
  const int64_t rows = logits.shape[0];
  const int64_t width = logits.shape[1];
  const int next_n = static_cast<int>(q.values.shape[1]);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t r = 0; r < rows; ++r) {
    QueryRow row;
    load_query_row(row, q, r / next_n, r % next_n, weights, r);
    const int64_t end = decode_row_end(context_lens, next_n, r);
    const PagedKeys paged(cache, element<int32_t>(block_table, r / next_n, 0));
    float* out = element<float>(logits, r, 0);
    score_keys(out, row, paged, 0, end);
    if (clean) fill_outside(out, width, 0, end);
  }
}

}  // namespace flashindexer::cpu
