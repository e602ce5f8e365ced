// SPDX-License-Identifier: Apache-2.0
// The one-call step planner (planning.h, plan_step) against the separate calls it stands for, on
// random steps (no prefill, all prefill, empty queries, requests over a budget, compression, DCP,
// padded decode rows, chunked decode rows), and its rejection of bad input, which leaves the
// outputs untouched.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/compare.h"
#include "support/seed.h"

namespace fitest {
namespace {

constexpr int32_t kPoison = -7;

struct Step {
  std::vector<int64_t> prefill_seq, prefill_query, decode_seq, decode_query;
  StepPlanOptions options;
  int64_t decode_rows = 0;
  StepLengths lengths() const { return {prefill_seq, prefill_query, decode_seq, decode_query}; }
};

// A length drawn around a budget: zero, small, within it, at it, past it.
int64_t length_near(Rng& rng, int64_t budget) {
  switch (rng.uniform_int(0, 4)) {
    case 0:
      return 0;
    case 1:
      return rng.uniform_int(1, 4);
    case 2:
      return rng.uniform_int(0, budget);
    case 3:
      return std::max<int64_t>(0, budget + rng.uniform_int(-2, 2));
    default:
      return rng.uniform_int(budget, 3 * budget + 1);
  }
}

Step random_step(Rng& rng) {
  Step step;
  StepPlanOptions& o = step.options;
  o.bounds.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 1, 2, 4, 128}));
  if (rng.bernoulli(0.4)) {
    o.bounds.dcp = {static_cast<int>(rng.uniform_int(2, 4)),
                    static_cast<int>(rng.uniform_int(1, 3))};
    o.bounds.dcp_rank = static_cast<int>(rng.uniform_int(0, o.bounds.dcp.ranks - 1));
  }
  o.budget = {rng.uniform_int(1, 400), rng.uniform_int(4, 4 * 30000),
              rng.bernoulli(0.2) ? rng.uniform_int(0, 60) : 0};
  o.next_n = static_cast<int>(rng.uniform_int(1, 4));
  // No prefill, all prefill, or a mix; seq_len around the budget (in keys, times R) so that
  // some requests exceed it alone; query lengths 0, all of the sequence, or in between.
  const int64_t prefills = rng.bernoulli(0.2) ? 0 : rng.uniform_int(1, 12);
  const int64_t decodes = rng.bernoulli(0.2) ? 0 : rng.uniform_int(1, 20);
  for (int64_t r = 0; r < prefills; ++r) {
    const int64_t seq_len = length_near(rng, o.budget.workspace_keys) * o.bounds.compress_ratio +
                            rng.uniform_int(0, o.bounds.compress_ratio - 1);
    const int64_t choice = rng.uniform_int(0, 3);
    const int64_t query_len = choice == 0   ? 0
                              : choice == 1 ? seq_len
                                            : rng.uniform_int(0, std::min<int64_t>(seq_len, 600));
    step.prefill_seq.push_back(seq_len);
    step.prefill_query.push_back(query_len);
  }
  int64_t tokens = 0;
  for (int64_t b = 0; b < decodes; ++b) {
    const int64_t d = rng.uniform_int(1, o.next_n);
    step.decode_seq.push_back(rng.uniform_int(d, 5000));
    step.decode_query.push_back(d);
    tokens += d;
  }
  step.decode_rows = tokens + (rng.bernoulli(0.3) ? rng.uniform_int(1, 5) : 0);
  o.decode_width = rng.bernoulli(0.3) ? rng.uniform_int(0, 6000) : -1;
  // No budget, or one that cuts the rows into several ranges (and at times one under 16 rows,
  // which both forms must reject).
  o.decode_logits_bytes = rng.bernoulli(0.4) ? 0 : rng.uniform_int(0, 32 * 5000 * 4);
  return step;
}

// The step through the separate calls. Returns false where one of them rejects it.
struct Separate {
  std::vector<PrefillChunk> chunks;
  std::vector<int32_t> ks, ke, row_lens, row_to_request;
  std::vector<RowRange> ranges;
  int64_t width = 0;
};

bool plan_separately(Separate& out, const Step& step) {
  const StepPlanOptions& o = step.options;
  std::vector<int64_t> key_lens;
  for (const int64_t s : step.prefill_seq) key_lens.push_back(s / o.bounds.compress_ratio);
  if (!plan_prefill_chunks(out.chunks, key_lens, step.prefill_query, o.budget).ok()) return false;
  int64_t rows = 0;
  for (const PrefillChunk& c : out.chunks) rows += c.query_end - c.query_begin;
  out.ks.assign(rows, kPoison);
  out.ke.assign(rows, kPoison);
  if (!build_prefill_step_row_bounds(out.ks, out.ke, out.chunks, step.prefill_seq,
                                     step.prefill_query, o.bounds)
           .ok()) {
    return false;
  }
  out.row_lens.assign(step.decode_rows, kPoison);
  out.row_to_request.assign(step.decode_rows, kPoison);
  if (!decode_flat_lens(out.row_lens, out.row_to_request, step.decode_seq, step.decode_query,
                        o.next_n, o.bounds)
           .ok()) {
    return false;
  }
  // The longest row read off the rows themselves, not derived as plan_step derives it.
  out.width =
      o.decode_width >= 0
          ? o.decode_width
          : (out.row_lens.empty() ? 0
                                  : *std::max_element(out.row_lens.begin(), out.row_lens.end()));
  return decode_row_ranges(out.ranges, step.decode_rows, out.width, o.decode_logits_bytes).ok();
}

bool same_chunks(const std::vector<PrefillChunk>& a, const std::vector<PrefillChunk>& b) {
  const auto fields = [](const PrefillChunk& c) {
    return std::vector<int64_t>{c.request_begin, c.request_end, c.query_begin, c.query_end,
                                c.token_begin,   c.token_end,   c.num_keys,    c.gathers_keys};
  };
  return std::equal(
      a.begin(), a.end(), b.begin(), b.end(),
      [&](const PrefillChunk& x, const PrefillChunk& y) { return fields(x) == fields(y); });
}

TEST(PlanStep, EqualsTheSeparateCallsOnRandomSteps) {
  FI_SEEDED_RNG(rng);
  int planned = 0, rejected = 0, without_prefill = 0, without_decode = 0;
  StepPlan plan;  // reused across steps, as an engine reuses it
  for (int trial = 0; trial < 3000; ++trial) {
    SCOPED_TRACE(::testing::Message() << "trial " << trial);
    const Step step = random_step(rng);
    Separate want;
    const bool valid = plan_separately(want, step);
    int64_t prefill_tokens = 0;
    for (const int64_t q : step.prefill_query) prefill_tokens += q;
    const int64_t spare = rng.uniform_int(0, 3);
    std::vector<int32_t> ks(prefill_tokens + spare, kPoison), ke(prefill_tokens + spare, kPoison);
    std::vector<int32_t> row_lens(step.decode_rows, kPoison);
    std::vector<int32_t> row_to_request(step.decode_rows, kPoison);
    const bool with_requests = rng.bernoulli(0.8);
    const Status status =
        plan_step(plan, ks, ke, row_lens,
                  with_requests ? std::span<int32_t>(row_to_request) : std::span<int32_t>(),
                  step.lengths(), step.options);
    if (!valid) {
      ++rejected;
      EXPECT_TRUE(IsRejected(status, StatusCode::kInvalidArgument, {"plan_step"}));
      EXPECT_TRUE(plan.chunks.empty() && plan.chunk_row_offsets.empty() &&
                  plan.decode_ranges.empty());
      for (const auto* out : {&ks, &ke, &row_lens, &row_to_request}) {
        EXPECT_TRUE(std::all_of(out->begin(), out->end(), [](int32_t v) { return v == kPoison; }));
      }
      continue;
    }
    ASSERT_TRUE(status.ok()) << status_text(status);
    ++planned;
    without_prefill += step.prefill_seq.empty() ? 1 : 0;
    without_decode += step.decode_seq.empty() ? 1 : 0;
    ASSERT_TRUE(same_chunks(plan.chunks, want.chunks));
    ASSERT_EQ(plan.chunk_row_offsets.size(), want.chunks.size() + 1);
    for (size_t c = 0; c < want.chunks.size(); ++c) {
      ASSERT_EQ(plan.chunk_row_offsets[c + 1] - plan.chunk_row_offsets[c],
                want.chunks[c].query_end - want.chunks[c].query_begin);
    }
    const auto rows = static_cast<size_t>(plan.chunk_row_offsets.back());
    ASSERT_EQ(rows, want.ks.size());
    ASSERT_TRUE(std::equal(want.ks.begin(), want.ks.end(), ks.begin()));
    ASSERT_TRUE(std::equal(want.ke.begin(), want.ke.end(), ke.begin()));
    // Past the chunks' rows the staging buffers are not written.
    ASSERT_TRUE(std::all_of(ks.begin() + rows, ks.end(), [](int32_t v) { return v == kPoison; }));
    ASSERT_TRUE(std::all_of(ke.begin() + rows, ke.end(), [](int32_t v) { return v == kPoison; }));
    ASSERT_EQ(row_lens, want.row_lens);
    if (with_requests) {
      ASSERT_EQ(row_to_request, want.row_to_request);
    } else {
      ASSERT_TRUE(std::all_of(row_to_request.begin(), row_to_request.end(),
                              [](int32_t v) { return v == kPoison; }));
    }
    ASSERT_EQ(plan.decode_width, want.width);
    ASSERT_EQ(plan.decode_ranges.size(), want.ranges.size());
    for (size_t i = 0; i < want.ranges.size(); ++i) {
      ASSERT_EQ(plan.decode_ranges[i].begin, want.ranges[i].begin);
      ASSERT_EQ(plan.decode_ranges[i].end, want.ranges[i].end);
    }
    std::vector<int64_t> key_lens;
    for (const int64_t s : step.prefill_seq) {
      key_lens.push_back(s / step.options.bounds.compress_ratio);
    }
    ASSERT_EQ(plan.prefill_key_lens, key_lens);
  }
  // The draw must reach every kind of step, or the comparison proves less than it claims.
  EXPECT_GT(planned, 1000);
  EXPECT_GT(rejected, 0);
  EXPECT_GT(without_prefill, 50);
  EXPECT_GT(without_decode, 50);
}

// ks and ke of long uncompressed runs (the vectorized path) ending at the largest i32 position,
// checked entry by entry: no lane may wrap into a stored row.
TEST(PlanStep, LongRunsUpToTheI32MaximumAreExact) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  for (const int64_t rows : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{1000}}) {
    Step step;
    step.prefill_seq = {kMax};
    step.prefill_query = {rows};
    step.options.budget = {kMax, std::numeric_limits<int64_t>::max(), 0};
    std::vector<int32_t> ks(rows, kPoison), ke(rows, kPoison);
    StepPlan plan;
    FI_ASSERT_OK(plan_step(plan, ks, ke, {}, {}, step.lengths(), step.options));
    for (int64_t i = 0; i < rows; ++i) {
      ASSERT_EQ(ks[i], 0);
      ASSERT_EQ(ke[i], kMax - rows + i + 1) << "row " << i << " of " << rows;
    }
  }
}

// With ks and ke both empty (the bounds built on the device, chunk by chunk) the plan is the one
// with them: the same chunks, offsets, decode rows and ranges.
TEST(PlanStep, WithoutBoundsPlansTheSameStep) {
  FI_SEEDED_RNG(rng);
  int64_t with_rows = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const Step step = random_step(rng);
    int64_t prefill_rows = 0;
    for (const int64_t m : step.prefill_query) prefill_rows += m;
    std::vector<int32_t> ks(prefill_rows), ke(prefill_rows);
    std::vector<int32_t> row_lens(step.decode_rows), requests(step.decode_rows);
    StepPlan want;
    const Status want_status =
        plan_step(want, ks, ke, row_lens, requests, step.lengths(), step.options);
    std::vector<int32_t> got_lens(step.decode_rows), got_requests(step.decode_rows);
    StepPlan got;
    const Status got_status =
        plan_step(got, {}, {}, got_lens, got_requests, step.lengths(), step.options);
    ASSERT_EQ(got_status.ok(), want_status.ok())
        << "trial " << trial << ": " << status_text(got_status);
    if (!want_status.ok()) continue;
    with_rows += want.chunk_row_offsets.back() > 0;
    ASSERT_EQ(got.chunks.size(), want.chunks.size()) << "trial " << trial;
    for (size_t c = 0; c < want.chunks.size(); ++c) {
      const PrefillChunk& a = got.chunks[c];
      const PrefillChunk& b = want.chunks[c];
      ASSERT_TRUE(a.request_begin == b.request_begin && a.request_end == b.request_end &&
                  a.query_begin == b.query_begin && a.query_end == b.query_end &&
                  a.token_begin == b.token_begin && a.num_keys == b.num_keys &&
                  a.gathers_keys == b.gathers_keys)
          << "trial " << trial << " chunk " << c;
    }
    EXPECT_EQ(got.chunk_row_offsets, want.chunk_row_offsets) << "trial " << trial;
    EXPECT_EQ(got_lens, row_lens) << "trial " << trial;
    EXPECT_EQ(got_requests, requests) << "trial " << trial;
    EXPECT_EQ(got.decode_width, want.decode_width) << "trial " << trial;
    ASSERT_EQ(got.decode_ranges.size(), want.decode_ranges.size()) << "trial " << trial;
    for (size_t r = 0; r < want.decode_ranges.size(); ++r) {
      EXPECT_EQ(got.decode_ranges[r].begin, want.decode_ranges[r].begin) << "trial " << trial;
      EXPECT_EQ(got.decode_ranges[r].end, want.decode_ranges[r].end) << "trial " << trial;
    }
  }
  EXPECT_GT(with_rows, 100);
}

TEST(PlanStep, RejectsBadInputNamingTheArgumentAndWritesNothing) {
  const Step good = [] {
    Step step;
    step.prefill_seq = {8, 6};
    step.prefill_query = {2, 3};
    step.decode_seq = {10, 4};
    step.decode_query = {1, 2};
    step.options.budget = {100, 1 << 20, 0};
    step.options.next_n = 2;
    return step;
  }();
  std::vector<int32_t> ks(5, kPoison), ke(5, kPoison), row_lens(3, kPoison),
      row_to_request(3, kPoison);
  StepPlan plan;
  FI_ASSERT_OK(plan_step(plan, ks, ke, row_lens, row_to_request, good.lengths(), good.options));
  std::fill(ks.begin(), ks.end(), kPoison);
  std::fill(row_lens.begin(), row_lens.end(), kPoison);

  const auto rejects = [&](const Step& step, std::initializer_list<const char*> names,
                           size_t ks_size = 5, size_t rows = 3, size_t requests = 3) {
    std::vector<int32_t> step_ks(ks_size, kPoison), step_ke(5, kPoison);
    std::vector<int32_t> step_rows(rows, kPoison), step_requests(requests, kPoison);
    const Status status =
        plan_step(plan, step_ks, step_ke, step_rows, step_requests, step.lengths(), step.options);
    const bool untouched =
        std::all_of(step_ks.begin(), step_ks.end(), [](int32_t v) { return v == kPoison; }) &&
        std::all_of(step_rows.begin(), step_rows.end(), [](int32_t v) { return v == kPoison; }) &&
        plan.chunks.empty() && plan.chunk_row_offsets.empty();
    const ::testing::AssertionResult result =
        IsRejected(status, StatusCode::kInvalidArgument, names);
    if (!result) return result;
    if (!untouched) return ::testing::AssertionFailure() << "a rejected step wrote an output";
    return ::testing::AssertionSuccess();
  };
  const auto with = [&](auto change) {
    Step step = good;
    change(step);
    return step;
  };
  EXPECT_TRUE(rejects(with([](Step& s) { s.prefill_query[1] = 7; }),
                      {"plan_step", "prefill_query_lens entry 1", "prefill_seq_lens"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.prefill_seq[0] = -1; }), {"prefill_seq_lens entry 0"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.prefill_query.push_back(1); }),
                      {"prefill_query_lens has 3 entries"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.decode_query[0] = 0; }), {"decode_query_lens entry 0"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.decode_query[1] = 5; }), {"next_n=2"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.decode_seq[1] = 1; }),
                      {"decode_query_lens entry 1", "decode_seq_lens"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.next_n = 0; }), {"next_n=0"}));
  EXPECT_TRUE(
      rejects(with([](Step& s) { s.options.budget.workspace_keys = 0; }), {"workspace_keys=0"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.budget.max_logits_bytes = 3; }),
                      {"max_logits_bytes=3"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.budget.min_split_key_len = -1; }),
                      {"min_split_key_len=-1"}));
  EXPECT_TRUE(
      rejects(with([](Step& s) { s.options.bounds.compress_ratio = 0; }), {"compress_ratio=0"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.bounds = {1, {2, 1}, 2}; }), {"dcp_rank=2"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.decode_width = -2; }), {"decode_width=-2"}));
  EXPECT_TRUE(rejects(with([](Step& s) { s.options.decode_logits_bytes = -1; }),
                      {"decode_logits_bytes=-1", "nonnegative"}));
  EXPECT_TRUE(rejects(with([](Step& s) {
                        s.decode_seq = std::vector<int64_t>(20, 1000);
                        s.decode_query = std::vector<int64_t>(20, 1);
                        s.options.decode_logits_bytes = 16 * 1000 * 2 - 1;
                      }),
                      {"decode_logits_bytes", "at least 16 bf16 rows"}, 5, 20, 20));
  EXPECT_TRUE(rejects(good, {"ks has 4 entries", "expected >= 5"}, 4));
  EXPECT_TRUE(rejects(good, {"decode_row_lens has 2 entries", "expected >= 3"}, 5, 2, 2));
  EXPECT_TRUE(rejects(good, {"decode_row_to_request has 2 entries"}, 5, 3, 2));
  // A workspace budget past i32 lets a group's keys overflow the i32 bounds.
  EXPECT_TRUE(
      rejects(with([](Step& s) {
                s.prefill_seq = {std::numeric_limits<int32_t>::max(), 2};
                s.prefill_query = {1, 1};
                s.options.budget = {int64_t{1} << 40, std::numeric_limits<int64_t>::max(), 0};
              }),
              {"exceed the i32 maximum"}, 2));
}

}  // namespace
}  // namespace fitest
