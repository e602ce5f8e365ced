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
      // (m + M) * (n + N) <= elems; a product that overflows is over any budget. (A division
      // would not overflow either, but costs tens of cycles a request where this costs a few.)
      int64_t logits = 0;
      if (__builtin_mul_overflow(next_queries, next_keys, &logits) || logits > max_logits_elems) {
        break;
      }
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
    keys += local_len(compressed_len(seq_lens[r], options.compress_ratio), options);
  }
  return keys;
}

namespace {

// The bounds of `rows` consecutive queries of one request, the first at `first_position`, whose
// keys start at row_start in the workspace.
void write_request_rows(int32_t* ks, int32_t* ke, int64_t rows, int64_t row_start,
                        int64_t first_position, const RowBoundsOptions& options) {
  const int ratio = options.compress_ratio;
  if (ratio == 1 && options.dcp.ranks == 1) {
    // Uncompressed, unsharded: a query at position p sees p + 1 keys.
    fill_consecutive_bounds(ks, ke, rows, static_cast<int32_t>(row_start),
                            static_cast<int32_t>(row_start + first_position + 1));
  } else if (options.dcp.ranks == 1) {
    // Compressed, unsharded: the visible keys grow by one every R positions, so they are counted
    // up rather than divided out on every row.
    int64_t visible = visible_keys(first_position, ratio);
    int64_t rows_to_next_key = ratio - (first_position + 1) % ratio;
    for (int64_t i = 0; i < rows; ++i) {
      ks[i] = static_cast<int32_t>(row_start);
      ke[i] = static_cast<int32_t>(row_start + visible);
      if (--rows_to_next_key == 0) {
        ++visible;
        rows_to_next_key = ratio;
      }
    }
  } else {
    for (int64_t i = 0; i < rows; ++i) {
      ks[i] = static_cast<int32_t>(row_start);
      ke[i] = static_cast<int32_t>(row_start +
                                   local_len(visible_keys(first_position + i, ratio), options));
    }
  }
}

}  // namespace

void prefill_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                        std::span<int32_t> token_to_seq, const PrefillChunk& chunk,
                        std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                        const RowBoundsOptions& options) {
  int64_t row_start = 0;    // cu[r] in the (local) workspace
  int64_t group_query = 0;  // the request's first query row within the group
  for (int32_t r = chunk.request_begin; r < chunk.request_end; ++r) {
    const int64_t seq_len = seq_lens[r];
    const int64_t query_len = query_lens[r];
    const int64_t keys = local_len(compressed_len(seq_len, options.compress_ratio), options);
    const int64_t first = std::max(group_query, chunk.query_begin);
    const int64_t last = std::min(group_query + query_len, chunk.query_end);
    if (last > first) {
      write_request_rows(ks.data() + (first - chunk.query_begin),
                         ke.data() + (first - chunk.query_begin), last - first, row_start,
                         seq_len - query_len + (first - group_query), options);
    }
    if (!token_to_seq.empty()) {
      std::fill_n(token_to_seq.begin() + row_start, keys,
                  static_cast<int32_t>(r - chunk.request_begin));
    }
    row_start += keys;
    group_query += query_len;
  }
}

void prefill_step_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                             std::span<const PrefillChunk> chunks,
                             std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                             const RowBoundsOptions& options) {
  size_t offset = 0;
  for (const PrefillChunk& chunk : chunks) {
    const auto count = static_cast<size_t>(chunk.query_end - chunk.query_begin);
    prefill_row_bounds(ks.subspan(offset, count), ke.subspan(offset, count), {}, chunk, seq_lens,
                       query_lens, options);
    offset += count;
  }
}

}  // namespace flashindexer::planning
