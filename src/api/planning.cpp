// SPDX-License-Identifier: Apache-2.0
// Public step planning (flashindexer/planning.h): validate the host lengths, then plan.
#include "flashindexer/planning.h"

#include <cstdint>

#include "api/checks/planning.h"
#include "core/checks.h"
#include "planning/planning.h"

namespace flashindexer {

Status plan_prefill_chunks(std::vector<PrefillChunk>& chunks, std::span<const int64_t> key_lens,
                           std::span<const int64_t> query_lens, const PrefillChunkBudget& budget) {
  chunks.clear();
  ArgCheck check("plan_prefill_chunks");
  check_same_size(check, "query_lens", query_lens.size(), "key_lens", key_lens.size());
  check_chunk_budget(check, budget, "key_lens", key_lens.size());
  check_lengths(check, "key_lens", key_lens);
  check_lengths(check, "query_lens", query_lens);
  if (!check.ok()) return check.status();
  planning::prefill_chunks(chunks, key_lens, query_lens, budget);
  return Status::Ok();
}

int64_t chunk_workspace_keys(const PrefillChunk& chunk, std::span<const int64_t> seq_lens,
                             const RowBoundsOptions& options) {
  ArgCheck check("chunk_workspace_keys");
  check_options(check, options);
  check_lengths(check, "seq_lens", seq_lens);
  const bool in_batch = chunk.request_begin >= 0 && chunk.request_begin <= chunk.request_end &&
                        chunk.request_end <= static_cast<int64_t>(seq_lens.size());
  if (!check.ok() || !in_batch) return -1;
  return planning::chunk_workspace_keys(chunk, seq_lens, options);
}

namespace {

// A chunk as the planner made it over these lengths.
void check_chunk(ArgCheck& check, const PrefillChunk& chunk, std::span<const int64_t> seq_lens,
                 std::span<const int64_t> query_lens, const RowBoundsOptions& options) {
  check_chunk_requests(check, chunk, static_cast<int64_t>(seq_lens.size()));
  if (!check.ok()) return;
  int64_t group_queries = 0;
  int64_t group_keys = 0;
  for (int32_t r = chunk.request_begin; r < chunk.request_end; ++r) {
    group_queries += query_lens[r];
    group_keys += seq_lens[r] / options.compress_ratio;
  }
  check.require(chunk.query_begin >= 0 && chunk.query_begin <= chunk.query_end &&
                    chunk.query_end <= group_queries,
                "chunk query rows [", chunk.query_begin, ", ", chunk.query_end,
                ") are not within the group's ", group_queries, " query rows");
  check.require(chunk.num_keys == group_keys, "chunk num_keys=", chunk.num_keys, ", expected ",
                group_keys, " (the sum of seq_lens / compress_ratio over the chunk's requests)");
  check.require(group_keys <= kMaxPlanningLength, "the chunk's ", group_keys,
                " keys exceed the i32 maximum ", kMaxPlanningLength);
}

}  // namespace

Status build_prefill_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                                std::span<int32_t> token_to_seq, const PrefillChunk& chunk,
                                std::span<const int64_t> seq_lens,
                                std::span<const int64_t> query_lens,
                                const RowBoundsOptions& options) {
  ArgCheck check("build_prefill_row_bounds");
  check_options(check, options);
  check_row_bound_lengths(check, "seq_lens", "query_lens", seq_lens, query_lens);
  if (!check.ok()) return check.status();
  check_chunk(check, chunk, seq_lens, query_lens, options);
  if (!check.ok()) return check.status();
  check_span_size(check, "ks", ks.size(), chunk.query_end - chunk.query_begin);
  check_span_size(check, "ke", ke.size(), chunk.query_end - chunk.query_begin);
  if (!token_to_seq.empty()) {
    check_span_size(check, "token_to_seq", token_to_seq.size(),
                    planning::chunk_workspace_keys(chunk, seq_lens, options));
  }
  if (!check.ok()) return check.status();
  planning::prefill_row_bounds(ks, ke, token_to_seq, chunk, seq_lens, query_lens, options);
  return Status::Ok();
}

Status build_prefill_step_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                                     std::span<const PrefillChunk> chunks,
                                     std::span<const int64_t> seq_lens,
                                     std::span<const int64_t> query_lens,
                                     const RowBoundsOptions& options) {
  ArgCheck check("build_prefill_step_row_bounds");
  check_options(check, options);
  check_row_bound_lengths(check, "seq_lens", "query_lens", seq_lens, query_lens);
  int64_t rows = 0;
  for (size_t c = 0; c < chunks.size() && check.ok(); ++c) {
    check_chunk(check, chunks[c], seq_lens, query_lens, options);
    rows += chunks[c].query_end - chunks[c].query_begin;
  }
  if (!check.ok()) return check.status();
  check_span_size(check, "ks", ks.size(), rows);
  check_span_size(check, "ke", ke.size(), rows);
  if (!check.ok()) return check.status();
  planning::prefill_step_row_bounds(ks, ke, chunks, seq_lens, query_lens, options);
  return Status::Ok();
}

Status decode_flat_lens(std::span<int32_t> row_lens, std::span<int32_t> row_to_request,
                        std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                        int next_n, const RowBoundsOptions& options) {
  ArgCheck check("decode_flat_lens");
  check_options(check, options);
  check.require(next_n >= 1, "next_n=", next_n, ", expected >= 1");
  const int64_t tokens =
      check_decode_lengths(check, "seq_lens", "query_lens", seq_lens, query_lens, next_n);
  if (!check.ok()) return check.status();
  check.require(static_cast<int64_t>(row_lens.size()) >= tokens, "row_lens has ", row_lens.size(),
                " entries, expected >= ", tokens, " (the sum of query_lens)");
  check.require(row_lens.size() + seq_lens.size() <= static_cast<size_t>(kMaxPlanningLength),
                "row_lens has ", row_lens.size(), " entries, too many for i32 ids");
  if (!row_to_request.empty()) {
    check_span_size(check, "row_to_request", row_to_request.size(),
                    static_cast<int64_t>(row_lens.size()));
  }
  if (!check.ok()) return check.status();
  planning::decode_flat_lens(row_lens, row_to_request, seq_lens, query_lens, options);
  return Status::Ok();
}

Status decode_native_lens(std::span<int32_t> lens, std::span<const int64_t> seq_lens, int next_n,
                          const RowBoundsOptions& options) {
  ArgCheck check("decode_native_lens");
  check_options(check, options);
  check.require(next_n >= 1, "next_n=", next_n, ", expected >= 1");
  check_lengths(check, "seq_lens", seq_lens);
  if (!check.ok()) return check.status();
  check_span_size(check, "lens", lens.size(), static_cast<int64_t>(seq_lens.size()) * next_n);
  if (!check.ok()) return check.status();
  planning::decode_native_lens(lens, seq_lens, next_n, options);
  return Status::Ok();
}

Status decode_pack_map(std::span<int32_t> packed_row_of_token,
                       std::span<int32_t> token_of_packed_row, std::span<const int64_t> query_lens,
                       int max_d) {
  ArgCheck check("decode_pack_map");
  check.require(max_d >= 1, "max_d=", max_d, ", expected >= 1");
  int64_t tokens = 0;
  for (size_t b = 0; b < query_lens.size() && check.ok(); ++b) {
    check.require(query_lens[b] >= 0 && query_lens[b] <= max_d, "query_lens entry ", b, " is ",
                  query_lens[b], ", expected 0 <= query_lens <= max_d=", max_d);
    tokens += query_lens[b];
  }
  if (!check.ok()) return check.status();
  const int64_t packed_rows = static_cast<int64_t>(query_lens.size()) * max_d;
  check.require(packed_rows <= kMaxPlanningLength, "requests * max_d = ", packed_rows,
                " exceeds the i32 maximum");
  check_span_size(check, "packed_row_of_token", packed_row_of_token.size(), tokens);
  check_span_size(check, "token_of_packed_row", token_of_packed_row.size(), packed_rows);
  if (!check.ok()) return check.status();
  planning::decode_pack_map(packed_row_of_token, token_of_packed_row, query_lens, max_d);
  return Status::Ok();
}

Status decode_row_ranges(std::vector<RowRange>& ranges, int64_t rows, int64_t width,
                         int64_t budget_bytes) {
  ranges.clear();
  ArgCheck check("decode_row_ranges");
  check.require(budget_bytes >= 0, "budget_bytes=", budget_bytes, ": budget must be nonnegative");
  check.require(rows >= 0, "rows=", rows, ", expected >= 0");
  check.require(width >= 0, "width=", width, ", expected >= 0");
  if (!check.ok()) return check.status();
  check_decode_range_budget(check, "budget_bytes", rows, width, budget_bytes);
  if (!check.ok()) return check.status();
  planning::decode_row_ranges(ranges, rows, width, budget_bytes);
  return Status::Ok();
}

}  // namespace flashindexer
