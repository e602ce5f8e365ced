// SPDX-License-Identifier: Apache-2.0
// Block tables between page sizes (flashindexer/planning.h), on validated arguments.
#include <algorithm>

#include "planning/planning.h"

namespace flashindexer::planning {

void reslice_block_table(std::span<int32_t> kernel_table, std::span<const int32_t> block_table,
                         int64_t rows, int64_t cols, int allocation_page_size, int kernel_page_size,
                         std::span<const int64_t> key_lens) {
  const int64_t kernel_cols = resliced_cols(cols, allocation_page_size, kernel_page_size);
  const bool split = allocation_page_size >= kernel_page_size;
  const int64_t factor =
      split ? allocation_page_size / kernel_page_size : kernel_page_size / allocation_page_size;
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t* pages = block_table.data() + row * cols;
    int32_t* kernel_pages = kernel_table.data() + row * kernel_cols;
    const int64_t used = used_kernel_pages(key_lens, row, kernel_cols, kernel_page_size);
    for (int64_t j = 0; j < used; ++j) {
      kernel_pages[j] = split ? static_cast<int32_t>(pages[j / factor] * factor + j % factor)
                              : static_cast<int32_t>(pages[j * factor] / factor);
    }
    std::fill(kernel_pages + used, kernel_pages + kernel_cols, -1);
  }
}

}  // namespace flashindexer::planning
