// SPDX-License-Identifier: Apache-2.0
// The planning rules of flashindexer/planning.h on already-validated host lengths. Host-only
// arithmetic over spans: no tensors, no device, so it lives apart from src/core (shared
// host/device code) and from the backends.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashindexer/planning.h"
#include "planning/decode_rule.h"

namespace flashindexer::planning {

// floor((position + 1) / R): the compressed keys visible to a query at `position`.
inline int64_t visible_keys(int64_t position, int compress_ratio) {
  return (position + 1) / compress_ratio;
}

// seq_len / R, without a division for the uncompressed layers (a 64-bit division costs tens of
// cycles, and the bounds take one a request of every chunk).
inline int64_t compressed_len(int64_t seq_len, int compress_ratio) {
  return compress_ratio == 1 ? seq_len : seq_len / compress_ratio;
}

// A length localized to one DCP rank (identity when ranks == 1).
inline int64_t local_len(int64_t length, const RowBoundsOptions& options) {
  return options.dcp.ranks == 1 ? length : dcp_local_len(length, options.dcp_rank, options.dcp);
}

inline DecodeRule decode_rule(const RowBoundsOptions& options) {
  return {options.compress_ratio, options.dcp.ranks, options.dcp.interleave, options.dcp_rank};
}

void prefill_chunks(std::vector<PrefillChunk>& chunks, std::span<const int64_t> key_lens,
                    std::span<const int64_t> query_lens, const PrefillChunkBudget& budget);

int64_t chunk_workspace_keys(const PrefillChunk& chunk, std::span<const int64_t> seq_lens,
                             const RowBoundsOptions& options);

void prefill_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                        std::span<int32_t> token_to_seq, const PrefillChunk& chunk,
                        std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                        const RowBoundsOptions& options);

// Every chunk's rows, one chunk after the other from ks[0] and ke[0].
void prefill_step_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                             std::span<const PrefillChunk> chunks,
                             std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                             const RowBoundsOptions& options);

// ks[i] = key_begin and ke[i] = first_key_end + i for i < rows: consecutive queries of one
// request, each seeing one key more than the one before (R = 1 on one rank). Most of a long
// prefill step's planning is this store stream, so it is written with the widest vectors the
// CPU has (row_fill.cpp), which the build's baseline target would not use.
void fill_consecutive_bounds(int32_t* ks, int32_t* ke, int64_t rows, int32_t key_begin,
                             int32_t first_key_end);

void decode_flat_lens(std::span<int32_t> row_lens, std::span<int32_t> row_to_request,
                      std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                      const RowBoundsOptions& options);

void decode_native_lens(std::span<int32_t> lens, std::span<const int64_t> seq_lens, int next_n,
                        const RowBoundsOptions& options);

void decode_pack_map(std::span<int32_t> packed_row_of_token, std::span<int32_t> token_of_packed_row,
                     std::span<const int64_t> query_lens, int max_d);

// The longest flattened decode row over these requests (0 for none): a request's last token sees
// all L_b positions, and the rank-local length never shrinks as the length grows.
int64_t longest_decode_row(std::span<const int64_t> seq_lens, const RowBoundsOptions& options);

// Assumes budget_bytes >= 0 and, when chunking is needed, a budget of at least 16 rows.
void decode_row_ranges(std::vector<RowRange>& ranges, int64_t rows, int64_t width,
                       int64_t budget_bytes);

// The rows per range decode_row_ranges caps at: floor(floor(B / (2W)) / 16) * 16.
inline int64_t decode_range_limit(int64_t width, int64_t budget_bytes) {
  return budget_bytes / (2 * width) / 16 * 16;
}

// Whether decode_row_ranges returns the whole batch as one range.
inline bool decode_fits_one_range(int64_t rows, int64_t width, int64_t budget_bytes) {
  return rows == 0 || budget_bytes == 0 || width == 0 || rows <= budget_bytes / (2 * width);
}

// The kernel table's columns (see resliced_block_table_cols), for page sizes already known to be
// positive multiples of one another.
inline int64_t resliced_cols(int64_t cols, int allocation_page_size, int kernel_page_size) {
  if (allocation_page_size >= kernel_page_size) {
    return cols * (allocation_page_size / kernel_page_size);
  }
  const int64_t factor = kernel_page_size / allocation_page_size;
  return (cols + factor - 1) / factor;
}

// The kernel pages of `row` that hold keys: all `kernel_cols` without key_lens, else
// ceil(key_lens[row] / kernel_page_size).
inline int64_t used_kernel_pages(std::span<const int64_t> key_lens, int64_t row,
                                 int64_t kernel_cols, int kernel_page_size) {
  if (key_lens.empty()) return kernel_cols;
  return (key_lens[row] + kernel_page_size - 1) / kernel_page_size;
}

// Assumes the checks of src/api/block_table.cpp passed.
void reslice_block_table(std::span<int32_t> kernel_table, std::span<const int32_t> block_table,
                         int64_t rows, int64_t cols, int allocation_page_size, int kernel_page_size,
                         std::span<const int64_t> key_lens);

}  // namespace flashindexer::planning
