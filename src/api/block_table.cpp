// SPDX-License-Identifier: Apache-2.0
// Public block-table and cache-view re-slicing (flashindexer/planning.h): validate, then re-slice.
#include <cstdint>
#include <limits>

#include "core/checks.h"
#include "flashindexer/planning.h"
#include "planning/planning.h"

namespace flashindexer {
namespace {

constexpr int64_t kMaxPage = std::numeric_limits<int32_t>::max();

bool multiples(int allocation_page_size, int kernel_page_size) {
  if (allocation_page_size < 1 || kernel_page_size < 1) return false;
  return allocation_page_size >= kernel_page_size ? allocation_page_size % kernel_page_size == 0
                                                  : kernel_page_size % allocation_page_size == 0;
}

void check_page_sizes(ArgCheck& check, int allocation_page_size, int kernel_page_size) {
  check.require(allocation_page_size >= 1, "allocation_page_size=", allocation_page_size,
                ", expected >= 1");
  check.require(kernel_page_size >= 1, "kernel_page_size=", kernel_page_size, ", expected >= 1");
  if (check.ok()) {
    check.require(multiples(allocation_page_size, kernel_page_size),
                  "allocation_page_size=", allocation_page_size,
                  " and kernel_page_size=", kernel_page_size,
                  ": expected one to be a whole multiple of the other");
  }
}

// The allocation pages of a row that hold keys: every column without key_lens.
int64_t used_allocation_pages(std::span<const int64_t> key_lens, int64_t row, int64_t cols,
                              int allocation_page_size) {
  if (key_lens.empty()) return cols;
  return (key_lens[row] + allocation_page_size - 1) / allocation_page_size;
}

// Every page that holds keys is >= 0 and its kernel ids fit in i32 (splitting), or every run of
// f pages holding keys is f consecutive ids from a multiple of f (merging).
void check_pages(ArgCheck& check, std::span<const int32_t> block_table, int64_t rows, int64_t cols,
                 int allocation_page_size, int kernel_page_size,
                 std::span<const int64_t> key_lens) {
  const bool split = allocation_page_size >= kernel_page_size;
  const int64_t factor =
      split ? allocation_page_size / kernel_page_size : kernel_page_size / allocation_page_size;
  for (int64_t row = 0; row < rows && check.ok(); ++row) {
    const int64_t used = used_allocation_pages(key_lens, row, cols, allocation_page_size);
    for (int64_t c = 0; c < used && check.ok(); ++c) {
      const int64_t page = block_table[row * cols + c];
      check.require(page >= 0, "block_table[", row, ", ", c, "]=", page,
                    " holds keys, expected a page id >= 0");
      if (!check.ok()) break;
      if (split) {
        check.require(page * factor + factor - 1 <= kMaxPage, "block_table[", row, ", ", c,
                      "]=", page, ": its kernel pages exceed the i32 maximum at factor ", factor);
      } else {
        const int64_t run_start = c - c % factor;
        const int64_t first = block_table[row * cols + run_start];
        check.require(first % factor == 0 && page == first + c % factor, "block_table[", row, ", ",
                      c, "]=", page, ": a kernel page of ", kernel_page_size,
                      " keys needs allocation pages ", first - first % factor, "..",
                      first - first % factor + factor - 1, " in order from column ", run_start,
                      " (", factor, " consecutive ids from a multiple of ", factor, ")");
      }
    }
  }
}

}  // namespace

int64_t resliced_block_table_cols(int64_t cols, int allocation_page_size, int kernel_page_size) {
  if (cols < 0 || !multiples(allocation_page_size, kernel_page_size)) return -1;
  return planning::resliced_cols(cols, allocation_page_size, kernel_page_size);
}

Status reslice_block_table(std::span<int32_t> kernel_table, std::span<const int32_t> block_table,
                           int64_t rows, int64_t cols, int allocation_page_size,
                           int kernel_page_size, std::span<const int64_t> key_lens) {
  ArgCheck check("reslice_block_table");
  check_page_sizes(check, allocation_page_size, kernel_page_size);
  check.require(rows >= 0, "rows=", rows, ", expected >= 0");
  check.require(cols >= 0 && cols <= kMaxPage, "cols=", cols, ", expected 0 <= cols <= ", kMaxPage);
  if (!check.ok()) return check.status();
  const int64_t kernel_cols = planning::resliced_cols(cols, allocation_page_size, kernel_page_size);
  check.require(static_cast<int64_t>(block_table.size()) == rows * cols, "block_table has ",
                block_table.size(), " entries, expected rows * cols = ", rows * cols);
  check.require(static_cast<int64_t>(kernel_table.size()) == rows * kernel_cols,
                "kernel_table has ", kernel_table.size(), " entries, expected rows * ", kernel_cols,
                " = ", rows * kernel_cols);
  check.require(key_lens.empty() || static_cast<int64_t>(key_lens.size()) == rows, "key_lens has ",
                key_lens.size(), " entries, expected 0 or rows = ", rows);
  for (size_t row = 0; row < key_lens.size() && check.ok(); ++row) {
    check.require(key_lens[row] >= 0 && key_lens[row] <= cols * allocation_page_size,
                  "key_lens entry ", row, " is ", key_lens[row],
                  ", expected 0 <= key_lens <= ", cols * allocation_page_size,
                  " (cols * allocation_page_size)");
  }
  if (!check.ok()) return check.status();
  check_pages(check, block_table, rows, cols, allocation_page_size, kernel_page_size, key_lens);
  if (!check.ok()) return check.status();
  planning::reslice_block_table(kernel_table, block_table, rows, cols, allocation_page_size,
                                kernel_page_size, key_lens);
  return Status::Ok();
}

Status reslice_k_cache(PagedKCache& kernel_cache, const PagedKCache& cache, int kernel_page_size) {
  ArgCheck check("reslice_k_cache");
  check_page_sizes(check, cache.page_size, kernel_page_size);
  check.require(cache.num_pages >= 0, "cache.num_pages=", cache.num_pages, ", expected >= 0");
  if (!check.ok()) return check.status();
  PagedKCache view = cache;
  view.page_size = kernel_page_size;
  if (cache.page_size >= kernel_page_size) {
    const int64_t factor = cache.page_size / kernel_page_size;
    check.require(cache.page_stride_bytes % (4 * factor) == 0,
                  "cache.page_stride_bytes=", cache.page_stride_bytes, " does not split into ",
                  factor, " kernel pages of a stride that is a multiple of 4 bytes");
    view.page_stride_bytes = cache.page_stride_bytes / factor;
    view.num_pages = cache.num_pages * factor;
  } else {
    const int64_t factor = kernel_page_size / cache.page_size;
    view.page_stride_bytes = cache.page_stride_bytes * factor;
    view.num_pages = cache.num_pages / factor;
  }
  if (!check.ok()) return check.status();
  const int64_t needed = PagedKCache::page_bytes(cache.format, kernel_page_size, cache.head_dim);
  check.require(view.page_stride_bytes >= needed, "a kernel page of ", kernel_page_size,
                " keys needs ", needed, " bytes, but the re-sliced page stride is ",
                view.page_stride_bytes, " bytes");
  if (!check.ok()) return check.status();
  kernel_cache = view;
  return Status::Ok();
}

}  // namespace flashindexer
