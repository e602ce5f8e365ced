// SPDX-License-Identifier: Apache-2.0
// Prefill chunking and per-row key bounds (flashindexer/planning.h).
#include <algorithm>

#include "planning/planning.h"

namespace flashindexer::planning {

void prefill_chunks(std::vector<PrefillChunk>& chunks, std::span<const int64_t> key_lens,
                    std::span<const int64_t> query_lens, const PrefillChunkBudget& budget) {
  chunks.clear();
  const int64_t requests = static_cast<int64_t>(key_lens.size());
  const int64_t max_logits_elems = budget.max_logits_bytes / 4;
  const auto sizing_len = [&](int64_t r) {
    return std::max(key_lens[r], budget.min_split_key_len);
  };
  int64_t end = 0;
  int64_t group_token_begin = 0;
  while (end < requests) {
    const int64_t start = end;
    int64_t queries = 0;
    int64_t sized_keys = 0;
    int64_t real_keys = 0;
    while (end < requests) {
      const int64_t next_keys = sized_keys + sizing_len(end);
      const int64_t next_queries = queries + query_lens[end];
      if (next_keys > budget.workspace_keys) break;
      // (m + M) * (n + N) <= elems, written as a division so it cannot overflow.
      if (next_keys > 0 && next_queries > max_logits_elems / next_keys) break;
      queries = next_queries;
      sized_keys = next_keys;
      real_keys += key_lens[end];
      ++end;
    }
    if (end == start) {  // one request over a budget: taken alone
      queries = query_lens[start];
      sized_keys = sizing_len(start);
      real_keys = key_lens[start];
      ++end;
    }
    if (real_keys > 0) {
      const int64_t max_q = sized_keys > 0 ? std::max<int64_t>(1, max_logits_elems / sized_keys)
                                           : std::max<int64_t>(1, queries);
      for (int64_t q_off = 0; q_off < queries; q_off += max_q) {
        PrefillChunk chunk;
        chunk.request_begin = static_cast<int32_t>(start);
        chunk.request_end = static_cast<int32_t>(end);
        chunk.query_begin = q_off;
        chunk.query_end = std::min(q_off + max_q, queries);
        chunk.token_begin = group_token_begin + chunk.query_begin;
        chunk.token_end = group_token_begin + chunk.query_end;
        chunk.num_keys = real_keys;
        chunk.gathers_keys = q_off == 0;
        chunks.push_back(chunk);
      }
    }
    group_token_begin += queries;
  }
}

int64_t chunk_workspace_keys(const PrefillChunk& chunk, std::span<const int64_t> seq_lens,
                             const RowBoundsOptions& options) {
  int64_t keys = 0;
  for (int32_t r = chunk.request_begin; r < chunk.request_end; ++r) {
    keys += local_len(seq_lens[r] / options.compress_ratio, options);
  }
  return keys;
}

void prefill_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                        std::span<int32_t> token_to_seq, const PrefillChunk& chunk,
                        std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                        const RowBoundsOptions& options) {
  int64_t row_start = 0;    // cu[r] in the (local) workspace
  int64_t group_query = 0;  // the request's first query row within the group
  for (int32_t r = chunk.request_begin; r < chunk.request_end; ++r) {
    const int64_t seq_len = seq_lens[r];
    const int64_t query_len = query_lens[r];
    const int64_t keys = local_len(seq_len / options.compress_ratio, options);
    const int64_t first = std::max(group_query, chunk.query_begin);
    const int64_t last = std::min(group_query + query_len, chunk.query_end);
    if (options.compress_ratio == 1 && options.dcp.ranks == 1) {
      // Uncompressed, unsharded: a query at position p sees p + 1 keys (no division a row).
      const int64_t first_end = row_start + seq_len - query_len + (first - group_query) + 1;
      for (int64_t q = first; q < last; ++q) {
        const int64_t row = q - chunk.query_begin;
        ks[row] = static_cast<int32_t>(row_start);
        ke[row] = static_cast<int32_t>(first_end + (q - first));
      }
    } else {
      for (int64_t q = first; q < last; ++q) {
        const int64_t position = seq_len - query_len + (q - group_query);
        const int64_t row = q - chunk.query_begin;
        ks[row] = static_cast<int32_t>(row_start);
        ke[row] = static_cast<int32_t>(
            row_start + local_len(visible_keys(position, options.compress_ratio), options));
      }
    }
    if (!token_to_seq.empty()) {
      std::fill_n(token_to_seq.begin() + row_start, keys,
                  static_cast<int32_t>(r - chunk.request_begin));
    }
    row_start += keys;
    group_query += query_len;
  }
}

}  // namespace flashindexer::planning
