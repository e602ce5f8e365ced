// SPDX-License-Identifier: Apache-2.0
// plan_step (flashindexer/planning.h): the separate planning calls' checks and rules in one
// call. Everything is checked before the first output is written, so a rejected step leaves the
// caller's buffers as they were.
#include <algorithm>
#include <cstdint>

#include "api/checks/planning.h"
#include "core/checks.h"
#include "flashindexer/planning.h"
#include "planning/planning.h"

namespace flashindexer {
namespace {

void clear(StepPlan& plan) {
  plan.prefill_key_lens.clear();
  plan.chunks.clear();
  plan.chunk_row_offsets.clear();
  plan.decode_ranges.clear();
  plan.decode_width = 0;
}

// The checks of the decode rows' outputs (decode_flat_lens) and of the row ranges' width and
// budget (decode_row_ranges). Returns the width the ranges are cut for.
int64_t check_decode_outputs(ArgCheck& check, std::span<int32_t> row_lens,
                             std::span<int32_t> row_to_request, const StepLengths& lengths,
                             const StepPlanOptions& options, int64_t tokens) {
  check.require(static_cast<int64_t>(row_lens.size()) >= tokens, "decode_row_lens has ",
                row_lens.size(), " entries, expected >= ", tokens,
                " (the sum of decode_query_lens)");
  check.require(
      row_lens.size() + lengths.decode_seq_lens.size() <= static_cast<size_t>(kMaxPlanningLength),
      "decode_row_lens has ", row_lens.size(), " entries, too many for i32 ids");
  if (!row_to_request.empty()) {
    check_span_size(check, "decode_row_to_request", row_to_request.size(),
                    static_cast<int64_t>(row_lens.size()));
  }
  check.require(options.decode_width >= -1, "decode_width=", options.decode_width,
                ", expected >= 0, or -1 for the longest decode row");
  if (!check.ok()) return 0;
  const int64_t width = options.decode_width >= 0
                            ? options.decode_width
                            : planning::longest_decode_row(lengths.decode_seq_lens, options.bounds);
  check_decode_range_budget(check, "decode_logits_bytes", static_cast<int64_t>(row_lens.size()),
                            width, options.decode_logits_bytes);
  return width;
}

// Chunks whose bounds fit i32 offsets, and ks / ke that hold all their rows (or are both empty:
// no bounds asked). Fills the offsets.
void check_chunk_rows(ArgCheck& check, StepPlan& plan, std::span<int32_t> ks,
                      std::span<int32_t> ke) {
  plan.chunk_row_offsets.assign(1, 0);
  for (const PrefillChunk& chunk : plan.chunks) {
    // A group over a workspace budget larger than i32 (the budget is i64) would overflow ks.
    check.require(chunk.num_keys <= kMaxPlanningLength, "the chunk's ", chunk.num_keys,
                  " keys exceed the i32 maximum ", kMaxPlanningLength);
    plan.chunk_row_offsets.push_back(plan.chunk_row_offsets.back() + chunk.query_end -
                                     chunk.query_begin);
  }
  const int64_t rows = plan.chunk_row_offsets.back();
  if (ks.empty() && ke.empty()) return;
  check.require(static_cast<int64_t>(ks.size()) >= rows, "ks has ", ks.size(),
                " entries, expected >= ", rows, " (the rows of the step's chunks)");
  check.require(static_cast<int64_t>(ke.size()) >= rows, "ke has ", ke.size(),
                " entries, expected >= ", rows, " (the rows of the step's chunks)");
}

}  // namespace

Status plan_step(StepPlan& plan, std::span<int32_t> ks, std::span<int32_t> ke,
                 std::span<int32_t> decode_row_lens, std::span<int32_t> decode_row_to_request,
                 const StepLengths& lengths, const StepPlanOptions& options) {
  clear(plan);
  ArgCheck check("plan_step");
  check_options(check, options.bounds);
  check.require(options.next_n >= 1, "next_n=", options.next_n, ", expected >= 1");
  check_chunk_budget(check, options.budget, "prefill_seq_lens", lengths.prefill_seq_lens.size());
  check_row_bound_lengths(check, "prefill_seq_lens", "prefill_query_lens", lengths.prefill_seq_lens,
                          lengths.prefill_query_lens);
  const int64_t tokens =
      check_decode_lengths(check, "decode_seq_lens", "decode_query_lens", lengths.decode_seq_lens,
                           lengths.decode_query_lens, options.next_n);
  if (!check.ok()) return check.status();
  const int64_t width =
      check_decode_outputs(check, decode_row_lens, decode_row_to_request, lengths, options, tokens);
  if (!check.ok()) return check.status();

  const int ratio = options.bounds.compress_ratio;
  plan.prefill_key_lens.resize(lengths.prefill_seq_lens.size());
  std::transform(lengths.prefill_seq_lens.begin(), lengths.prefill_seq_lens.end(),
                 plan.prefill_key_lens.begin(),
                 [ratio](int64_t seq_len) { return planning::compressed_len(seq_len, ratio); });
  planning::prefill_chunks(plan.chunks, plan.prefill_key_lens, lengths.prefill_query_lens,
                           options.budget);
  check_chunk_rows(check, plan, ks, ke);
  if (!check.ok()) {
    clear(plan);
    return check.status();
  }

  if (!ks.empty() || !ke.empty()) {
    planning::prefill_step_row_bounds(ks, ke, plan.chunks, lengths.prefill_seq_lens,
                                      lengths.prefill_query_lens, options.bounds);
  }
  planning::decode_flat_lens(decode_row_lens, decode_row_to_request, lengths.decode_seq_lens,
                             lengths.decode_query_lens, options.bounds);
  plan.decode_width = width;
  planning::decode_row_ranges(plan.decode_ranges, static_cast<int64_t>(decode_row_lens.size()),
                              width, options.decode_logits_bytes);
  return Status::Ok();
}

}  // namespace flashindexer
