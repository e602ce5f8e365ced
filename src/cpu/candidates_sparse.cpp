// SPDX-License-Identifier: Apache-2.0
// CPU sparse-consumer metadata (spec §8.5): candidate blocks to sparse block indices with their
// valid column counts, and the remap of the sparse top-k's columns back to positions.
#include <omp.h>

#include <algorithm>

#include "core/access.h"
#include "cpu/candidates.h"

namespace flashindexer::cpu {

void candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                        const TensorView& candidates,
                                        const std::vector<RowBound>& bounds, int block_size,
                                        int sparse_block, int threads) {
  const int64_t ratio = block_size / sparse_block;
  const int64_t slots = sparse_indices.shape[1];
#pragma omp parallel num_threads(threads)
  {
    std::vector<int64_t> kept;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < candidates.shape[0]; ++t) {
      const RowBound& b = bounds[t];
      const int64_t row_sparse_blocks =
          (std::max<int64_t>(b.ke - b.ks, 0) + sparse_block - 1) / sparse_block;
      kept.clear();
      for (int64_t i = 0; i < candidates.shape[1]; ++i) {
        const int64_t c = *element<int32_t>(candidates, t, i);
        for (int64_t part = 0; part < ratio; ++part) {
          const int64_t block = c * ratio + part;
          if (block >= 0 && block < row_sparse_blocks) kept.push_back(block);
        }
      }
      std::sort(kept.begin(), kept.end());
      const int64_t base = b.ks / sparse_block;
      const int64_t last = kept.empty() ? 0 : kept.back();
      int32_t* row = element<int32_t>(sparse_indices, t, 0);
      for (int64_t i = 0; i < slots; ++i) {
        row[i] =
            static_cast<int32_t>((i < static_cast<int64_t>(kept.size()) ? kept[i] : last) + base);
      }
      const int64_t valid =
          kept.empty()
              ? 0
              : (static_cast<int64_t>(kept.size()) - 1) * sparse_block +
                    std::clamp<int64_t>(b.ke - (last * sparse_block + b.ks), 1, sparse_block);
      *element<int32_t>(end, t) = static_cast<int32_t>(valid);
    }
  }
}

void sparse_topk_remap(const TensorView& out, const TensorView& columns,
                       const TensorView& sparse_indices, const std::vector<RowBound>& bounds,
                       int sparse_block, int threads) {
  const int64_t width = sparse_indices.shape[1] * sparse_block;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < columns.shape[0]; ++t) {
    const int64_t base = bounds[t].ks / sparse_block;
    const int32_t* blocks = element<int32_t>(sparse_indices, t, 0);
    for (int64_t i = 0; i < columns.shape[1]; ++i) {
      const int64_t c = *element<int32_t>(columns, t, i);
      *element<int32_t>(out, t, i) =
          c >= 0 && c < width
              ? static_cast<int32_t>((blocks[c / sparse_block] - base) * sparse_block +
                                     c % sparse_block)
              : -1;
    }
  }
}

}  // namespace flashindexer::cpu
