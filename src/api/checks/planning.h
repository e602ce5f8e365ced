// SPDX-License-Identifier: Apache-2.0
// Argument checks shared by the host planning calls (planning.cpp) and the one-call step planner
// (planning_step.cpp), so that plan_step rejects exactly what the separate calls reject. Each
// takes the argument's name, which is the name of the calling function's parameter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

#include "core/checks.h"
#include "flashindexer/planning.h"

namespace flashindexer {

// Lengths, positions and workspace offsets are i32 in every kernel the plan feeds.
inline constexpr int64_t kMaxPlanningLength = std::numeric_limits<int32_t>::max();

// Every entry within [0, kMaxPlanningLength].
void check_lengths(ArgCheck& check, const char* name, std::span<const int64_t> lengths);

void check_same_size(ArgCheck& check, const char* name, size_t size, const char* other_name,
                     size_t other_size);

void check_span_size(ArgCheck& check, const char* name, size_t size, int64_t expected);

// compress_ratio >= 1 and a valid DCP group and rank.
void check_options(ArgCheck& check, const RowBoundsOptions& options);

// The budget of plan_prefill_chunks and the request count (the size of `lengths_name`) it can
// number in i32.
void check_chunk_budget(ArgCheck& check, const PrefillChunkBudget& budget, const char* lengths_name,
                        size_t requests);

// A chunk's requests: a non-empty range within the batch's `requests`.
void check_chunk_requests(ArgCheck& check, const PrefillChunk& chunk, int64_t requests);

// The lengths every chunk's row bounds read: same sizes, in range, query_lens <= seq_lens.
void check_row_bound_lengths(ArgCheck& check, const char* seq_name, const char* query_name,
                             std::span<const int64_t> seq_lens,
                             std::span<const int64_t> query_lens);

// Decode lengths: same sizes, seq_lens in range, 1 <= query_lens <= min(next_n, seq_lens).
// Returns the sum of query_lens (the tokens).
int64_t check_decode_lengths(ArgCheck& check, const char* seq_name, const char* query_name,
                             std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                             int next_n);

// A decode_row_ranges budget for `rows` rows of `width` columns (both known to be >= 0).
void check_decode_range_budget(ArgCheck& check, const char* budget_name, int64_t rows,
                               int64_t width, int64_t budget_bytes);

}  // namespace flashindexer
