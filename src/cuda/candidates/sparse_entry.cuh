// SPDX-License-Identifier: Apache-2.0
// The entry (format_sparse.cuh) of a sparse block in the paged cache, shared by the consumer's
// rows metadata (sparse_rows.cu) and the sparse logits ops (sparse_logits.cu).
#pragma once

#include <cstdint>

#include "cuda/candidates/sparse_rows.h"
#include "cuda/sm90_scoring/format_sparse.cuh"

namespace flashindexer::cuda::candidates {

// The block whose first key is at `position` of request `request`: page << kSparseRowBits | row.
// A position outside the block table, or a table entry outside the cache (not a valid input),
// names page 0 instead, never a box outside the tensor (copies of such boxes stopped the kernel
// on an H200: illegal instruction).
__device__ __forceinline__ int32_t paged_entry(const SparseSource& source, int64_t request,
                                               int64_t position) {
  if (position < 0) return 0;
  const int64_t page_index = position / source.page_size;
  int32_t page =
      page_index < source.table_pages
          ? source.block_table[request * source.table_stride_b + page_index * source.table_stride_p]
          : 0;
  if (page < 0 || page >= source.num_pages) page = 0;
  return page << scoring::kSparseRowBits | static_cast<int32_t>(position % source.page_size);
}

}  // namespace flashindexer::cuda::candidates
