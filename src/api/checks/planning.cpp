// SPDX-License-Identifier: Apache-2.0
// Argument checks of the host planning calls (checks/planning.h).
#include "api/checks/planning.h"

#include "planning/planning.h"

namespace flashindexer {
namespace {

// Whether 0 <= length <= kMaxPlanningLength, as one unsigned compare.
bool length_in_range(int64_t length) {
  return static_cast<uint64_t>(length) <= static_cast<uint64_t>(kMaxPlanningLength);
}

}  // namespace

// Each check first scans its lengths without a branch, which the compiler vectorizes, and looks
// for the entry to name only when the scan finds one: a step checks every length of its batch,
// and entry-by-entry checks had cost more than planning a decode batch.

void check_lengths(ArgCheck& check, const char* name, std::span<const int64_t> lengths) {
  bool all_in_range = true;
  for (const int64_t length : lengths) all_in_range &= length_in_range(length);
  if (all_in_range) return;
  for (size_t i = 0; i < lengths.size() && check.ok(); ++i) {
    check.require(lengths[i] >= 0 && lengths[i] <= kMaxPlanningLength, name, " entry ", i, " is ",
                  lengths[i], ", expected 0 <= ", name, " <= ", kMaxPlanningLength);
  }
}

void check_same_size(ArgCheck& check, const char* name, size_t size, const char* other_name,
                     size_t other_size) {
  check.require(size == other_size, name, " has ", size, " entries, expected ", other_size,
                " (the size of ", other_name, ")");
}

void check_span_size(ArgCheck& check, const char* name, size_t size, int64_t expected) {
  check.require(static_cast<int64_t>(size) == expected, name, " has ", size, " entries, expected ",
                expected);
}

void check_options(ArgCheck& check, const RowBoundsOptions& options) {
  check.require(options.compress_ratio >= 1, "compress_ratio=", options.compress_ratio,
                ", expected >= 1");
  check.require(options.dcp.ranks >= 1, "dcp.ranks=", options.dcp.ranks, ", expected >= 1");
  check.require(options.dcp.interleave >= 1, "dcp.interleave=", options.dcp.interleave,
                ", expected >= 1");
  if (check.ok()) {
    check.require(options.dcp_rank >= 0 && options.dcp_rank < options.dcp.ranks,
                  "dcp_rank=", options.dcp_rank, ", expected 0 <= dcp_rank < ", options.dcp.ranks);
  }
}

void check_chunk_budget(ArgCheck& check, const PrefillChunkBudget& budget, const char* lengths_name,
                        size_t requests) {
  check.require(requests <= static_cast<size_t>(kMaxPlanningLength), lengths_name, " has ",
                requests, " requests, expected <= ", kMaxPlanningLength);
  check.require(budget.workspace_keys >= 1, "workspace_keys=", budget.workspace_keys,
                ", expected >= 1");
  check.require(budget.max_logits_bytes >= 4, "max_logits_bytes=", budget.max_logits_bytes,
                ", expected >= 4 (one fp32 logit)");
  check.require(budget.min_split_key_len >= 0 && budget.min_split_key_len <= kMaxPlanningLength,
                "min_split_key_len=", budget.min_split_key_len,
                ", expected 0 <= ", "min_split_key_len <= ", kMaxPlanningLength);
}

void check_chunk_requests(ArgCheck& check, const PrefillChunk& chunk, int64_t requests) {
  check.require(chunk.request_begin >= 0 && chunk.request_begin < chunk.request_end &&
                    chunk.request_end <= requests,
                "chunk requests [", chunk.request_begin, ", ", chunk.request_end,
                ") are not a non-empty range within the ", requests, " requests");
}

void check_row_bound_lengths(ArgCheck& check, const char* seq_name, const char* query_name,
                             std::span<const int64_t> seq_lens,
                             std::span<const int64_t> query_lens) {
  check_same_size(check, query_name, query_lens.size(), seq_name, seq_lens.size());
  check_lengths(check, seq_name, seq_lens);
  check_lengths(check, query_name, query_lens);
  if (!check.ok()) return;
  bool all_within = true;
  for (size_t r = 0; r < seq_lens.size(); ++r) all_within &= query_lens[r] <= seq_lens[r];
  if (all_within) return;
  for (size_t r = 0; r < seq_lens.size() && check.ok(); ++r) {
    check.require(query_lens[r] <= seq_lens[r], query_name, " entry ", r, " is ", query_lens[r],
                  ", expected <= ", seq_name, " entry ", seq_lens[r]);
  }
}

int64_t check_decode_lengths(ArgCheck& check, const char* seq_name, const char* query_name,
                             std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                             int next_n) {
  check_same_size(check, query_name, query_lens.size(), seq_name, seq_lens.size());
  check_lengths(check, seq_name, seq_lens);
  if (!check.ok()) return 0;
  int64_t tokens = 0;
  bool all_valid = true;
  for (size_t b = 0; b < query_lens.size(); ++b) {
    all_valid &= (query_lens[b] >= 1) & (query_lens[b] <= next_n) & (query_lens[b] <= seq_lens[b]);
    tokens += query_lens[b];
  }
  if (all_valid) return tokens;
  tokens = 0;
  for (size_t b = 0; b < query_lens.size() && check.ok(); ++b) {
    check.require(query_lens[b] >= 1 && query_lens[b] <= next_n, query_name, " entry ", b, " is ",
                  query_lens[b], ", expected 1 <= ", query_name, " <= next_n=", next_n);
    check.require(query_lens[b] <= seq_lens[b], query_name, " entry ", b, " is ", query_lens[b],
                  ", expected <= ", seq_name, " entry ", seq_lens[b]);
    tokens += query_lens[b];
  }
  return tokens;
}

void check_decode_range_budget(ArgCheck& check, const char* budget_name, int64_t rows,
                               int64_t width, int64_t budget_bytes) {
  check.require(budget_bytes >= 0, budget_name, "=", budget_bytes, ": budget must be nonnegative");
  if (!check.ok() || planning::decode_fits_one_range(rows, width, budget_bytes)) return;
  check.require(planning::decode_range_limit(width, budget_bytes) >= 16, budget_name, "=",
                budget_bytes, " with width=", width, ": budget must fit at least 16 bf16 rows (",
                32 * width, " bytes)");
}

}  // namespace flashindexer
