// CPU topk_per_row: rank keys of a row's visible logits, then an exact nth_element selection.
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/decode_rows.h"
#include "cpu/select.h"
#include "flashindexer/formats.h"

namespace flashindexer::cpu {

void topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                  bool sorted, int threads) {
  const int64_t rows = out.shape[0];
  const bool bf16 = logits.dtype == DType::kBF16;
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint64_t> keys;
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t start = 0;
      int64_t end;
      if (ranges.is_prefill()) {
        start = *element<int32_t>(ranges.ks, r);
        end = *element<int32_t>(ranges.ke, r);
      } else {
        end = decode_row_end(ranges.lengths, ranges.next_n, r);
      }
      const int64_t visible = std::max<int64_t>(end - start, 0);
      int32_t* out_row = element<int32_t>(out, r, 0);
      keys.resize(visible);
      if (bf16) {
        const uint16_t* row = element<uint16_t>(logits, r, start);
        for (int64_t i = 0; i < visible; ++i) keys[i] = rank_key(bf16_to_float(row[i]), i);
      } else {
        const float* row = element<float>(logits, r, start);
        for (int64_t i = 0; i < visible; ++i) keys[i] = rank_key(row[i], i);
      }
      const size_t kept = keep_largest(keys.data(), keys.size(), k, sorted);
      write_indices(out_row, keys.data(), kept, k);
    }
  }
}

}  // namespace flashindexer::cpu
