// SPDX-License-Identifier: Apache-2.0
// Decode metadata and decode row chunking (flashindexer/planning.h).
#include <algorithm>

#include "planning/decode_rule.h"
#include "planning/planning.h"

namespace flashindexer::planning {

void decode_flat_lens(std::span<int32_t> row_lens, std::span<int32_t> row_to_request,
                      std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                      const RowBoundsOptions& options) {
  const DecodeRule rule = decode_rule(options);
  // Uncompressed on one rank a token's keys are its visible positions: no division a row.
  const bool positions_are_keys = rule.compress_ratio == 1 && rule.dcp_ranks == 1;
  const int64_t requests = static_cast<int64_t>(seq_lens.size());
  int64_t row = 0;
  for (int64_t b = 0; b < requests; ++b) {
    const int64_t past = seq_lens[b] - query_lens[b];
    for (int64_t i = 0; i < query_lens[b]; ++i, ++row) {
      row_lens[row] = positions_are_keys ? static_cast<int32_t>(past + i + 1)
                                         : decode_token_keys(past + i + 1, rule);
      if (!row_to_request.empty()) row_to_request[row] = static_cast<int32_t>(b);
    }
  }
  for (int64_t pad = 0; row < static_cast<int64_t>(row_lens.size()); ++row, ++pad) {
    row_lens[row] = 0;
    if (!row_to_request.empty()) row_to_request[row] = static_cast<int32_t>(requests + pad);
  }
}

void decode_native_lens(std::span<int32_t> lens, std::span<const int64_t> seq_lens, int next_n,
                        const RowBoundsOptions& options) {
  const DecodeRule rule = decode_rule(options);
  for (size_t b = 0; b < seq_lens.size(); ++b) {
    for (int j = 0; j < next_n; ++j) {
      lens[b * next_n + j] = native_token_keys(seq_lens[b], next_n, j, rule);
    }
  }
}

void decode_pack_map(std::span<int32_t> packed_row_of_token, std::span<int32_t> token_of_packed_row,
                     std::span<const int64_t> query_lens, int max_d) {
  std::fill(token_of_packed_row.begin(), token_of_packed_row.end(), -1);
  int64_t token = 0;
  for (size_t b = 0; b < query_lens.size(); ++b) {
    for (int64_t i = 0; i < query_lens[b]; ++i, ++token) {
      const int64_t packed = static_cast<int64_t>(b) * max_d + i;
      packed_row_of_token[token] = static_cast<int32_t>(packed);
      token_of_packed_row[packed] = static_cast<int32_t>(token);
    }
  }
}

int64_t longest_decode_row(std::span<const int64_t> seq_lens, const RowBoundsOptions& options) {
  // The key count never shrinks as the length grows, so the longest row is the longest
  // request's last, and one division does.
  int64_t longest_seq = -1;
  for (const int64_t seq_len : seq_lens) longest_seq = std::max(longest_seq, seq_len);
  return longest_seq < 0 ? 0 : decode_token_keys(longest_seq, decode_rule(options));
}

void decode_row_ranges(std::vector<RowRange>& ranges, int64_t rows, int64_t width,
                       int64_t budget_bytes) {
  ranges.clear();
  if (decode_fits_one_range(rows, width, budget_bytes)) {
    ranges.push_back({0, rows});
    return;
  }
  constexpr int64_t kRowUnit = 16;  // ranges are whole multiples of 16 rows but the last
  const int64_t units_per_range = decode_range_limit(width, budget_bytes) / kRowUnit;
  const int64_t units = (rows + kRowUnit - 1) / kRowUnit;
  const int64_t count = (units + units_per_range - 1) / units_per_range;
  const int64_t base = units / count;
  const int64_t extra = units % count;
  int64_t start = 0;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t end = std::min(rows, start + kRowUnit * (base + (i < extra ? 1 : 0)));
    ranges.push_back({start, end});
    start = end;
  }
}

}  // namespace flashindexer::planning
