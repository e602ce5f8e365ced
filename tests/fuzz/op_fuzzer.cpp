// SPDX-License-Identifier: Apache-2.0
// libFuzzer target over the public op entry points on the CPU.
//
// The first input byte picks the op family; the next ones choose dtypes, shapes, strides, row
// bounds, lengths, block tables, slot mappings, k, next_n and the run options, with at most one
// argument broken on purpose. Each call must either return a non-Ok Status (never for a call
// whose arguments are all valid) or a result that satisfies the op's contract: top-k rows are a
// prefix of distinct in-range indices then -1 and equal the reference selection; the indexer ops
// equal topk_per_row over their logits op bit for bit; logits match the fp64 reference within its
// tolerance; quantizers match the reference quantizer bit for bit; no input and no byte outside
// an output's elements is written. A violation aborts, which libFuzzer reports as a crash.
//
// Build and run (clang): configure with -DCMAKE_CXX_COMPILER=clang++ -DFLASHINDEXER_CUDA=OFF
// -DFLASHINDEXER_FUZZ=ON, build flashindexer_fuzz, then
//   flashindexer_fuzz -max_total_time=60 <scratch corpus dir> tests/fuzz/corpus
// (`make test` does this for 60 s). libFuzzer adds the inputs it finds to the first directory,
// so that one must never be tests/fuzz/corpus. An input that fails goes into
// tests/fuzz/regressions/ under a name that says what it broke; the test fuzz_regressions_replay
// (any sanitizer build) replays every file there and in corpus/ through the same entry point.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "fuzz_ops.h"
#include "reference/reference.h"

namespace flashindexer::fuzz {

int pick_k(FuzzInput& in, int64_t limit, int max_k) {
  int k;
  switch (in.range(0, 15)) {
    case 0:
      k = 0;
      break;
    case 1:
      k = max_k + 1;
      break;
    case 2:
      k = max_k;
      break;
    case 3:
      k = -1;
      break;
    default:
      k = static_cast<int>(in.range(1, std::min<int64_t>(limit + 1, max_k)));
  }
  if (k < 1 || k > max_k) in.valid = false;
  return k;
}

namespace {

// logit (an op's output) against the fp64 reference score of the same pair.
void expect_close(const char* op, float logit, const reference::Score& score, int head_dim,
                  int heads, int64_t row, int64_t column) {
  if (!std::isfinite(score.value) || !std::isfinite(score.magnitude) || score.magnitude > 1e37) {
    return;  // the fp32 evaluation may overflow or meet NaN in another order
  }
  const double tolerance = reference::score_tolerance(score.magnitude, head_dim, heads, false);
  if (!(std::fabs(static_cast<double>(logit) - score.value) <= tolerance)) {
    violation(op, "logit[" + std::to_string(row) + ", " + std::to_string(column) + "] = " +
                      std::to_string(logit) + ", reference " + std::to_string(score.value) +
                      " (tolerance " + std::to_string(tolerance) + ")");
  }
}

void expect_clean_outside(const char* op, const Tensor& logits, int64_t row, int64_t start,
                          int64_t end) {
  for (int64_t s = 0; s < logits.view.shape[1]; ++s) {
    if (s >= start && s < end) continue;
    const float value = logits.get<float>({row, s});
    if (!(std::isinf(value) && value < 0)) {
      violation(op, "clean logits: column " + std::to_string(s) + " of row " + std::to_string(row) +
                        " outside [" + std::to_string(start) + ", " + std::to_string(end) +
                        ") holds " + std::to_string(value));
    }
  }
}

struct Operands {
  bool mxfp4 = false;
  int heads = 32;
  int head_dim = 128;
  Tensor q_values, q_scales, weights;
  QuantizedTensor q() const { return {q_values.view, mxfp4 ? q_scales.view : TensorView{}}; }
  void snapshot() {
    q_values.snapshot();
    q_scales.snapshot();
    weights.snapshot();
  }
  void expect_unchanged_inputs(const char* op) const {
    expect_unchanged(op, "q.values", q_values);
    expect_unchanged(op, "q.scales", q_scales);
    expect_unchanged(op, "weights", weights);
  }
};

void pick_head_shape(FuzzInput& in, Operands& ops) {
  ops.mxfp4 = in.chance(96);
  ops.heads = in.pick({32, 64});
  ops.head_dim = in.pick({64, 128});
  if (in.chance(6)) {  // unsupported head shapes
    ops.heads = in.pick({1, 16, 33});
    in.valid = false;
  }
}

// q values [outer..., H, D or D/2] and MXFP4 scales; weights [rows, H].
void make_query(FuzzInput& in, Operands& ops, std::initializer_list<int64_t> outer, int64_t rows) {
  const int64_t values_dim = ops.mxfp4 ? ops.head_dim / 2 : ops.head_dim;
  const DType values_dtype = ops.mxfp4 ? DType::kE2M1x2 : DType::kE4M3;
  const auto it = outer.begin();
  if (outer.size() == 1) {
    ops.q_values = make_tensor(in, values_dtype, {it[0], ops.heads, values_dim}, Fill::kRawBytes);
    if (ops.mxfp4) {
      ops.q_scales =
          make_tensor(in, DType::kUE8M0, {it[0], ops.heads, ops.head_dim / 32}, Fill::kScaleBytes);
    }
  } else {
    ops.q_values =
        make_tensor(in, values_dtype, {it[0], it[1], ops.heads, values_dim}, Fill::kRawBytes);
    if (ops.mxfp4) {
      ops.q_scales = make_tensor(in, DType::kUE8M0, {it[0], it[1], ops.heads, ops.head_dim / 32},
                                 Fill::kScaleBytes);
    }
  }
  ops.weights = make_tensor(in, DType::kF32, {rows, ops.heads}, Fill::kWeights);
}

}  // namespace

void fuzz_topk(FuzzInput& in) {
  const int64_t rows = in.range(0, 6);
  const int64_t width = in.range(0, 80);
  const DType dtype = in.chance(80) ? DType::kBF16 : DType::kF32;
  Tensor logits = make_tensor(in, dtype, {rows, width}, Fill::kScores);
  const int k = pick_k(in, width, kMaxTopK);
  Tensor out =
      make_tensor(in, DType::kI32, {rows, std::max(k, 1) + in.range(0, 2)}, Fill::kRawBytes);
  Tensor ks, ke, lengths;
  RowRanges ranges;
  const int form = static_cast<int>(in.range(0, 2));
  if (form == 0) {
    ks = make_tensor(in, DType::kI32, {rows}, Fill::kZero);
    ke = make_tensor(in, DType::kI32, {rows}, Fill::kZero);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t start = in.range(0, width);
      int64_t end = in.range(start, width);
      if (in.chance(6)) {
        start = in.range(-2, width + 2);
        end = in.range(-2, width + 2);
        if (!(start >= 0 && start <= end && end <= width)) in.valid = false;
      }
      ks.set_i32({r}, static_cast<int32_t>(start));
      ke.set_i32({r}, static_cast<int32_t>(end));
    }
    ranges = RowRanges::prefill(ks.view, ke.view);
  } else {
    // [rows] with next_n = 1, [B] with next_n rows each, or [B, next_n].
    int next_n = form == 1 ? static_cast<int>(in.range(1, 3)) : static_cast<int>(in.range(1, 3));
    const bool two_d = form == 2;
    int64_t batch = next_n == 0 ? 0 : rows / next_n;
    if (rows % next_n != 0) in.valid = false;
    lengths = two_d ? make_tensor(in, DType::kI32, {batch, next_n}, Fill::kZero)
                    : make_tensor(in, DType::kI32, {next_n == 1 ? rows : batch}, Fill::kZero);
    for (int64_t b = 0; b < (next_n == 1 && !two_d ? rows : batch); ++b) {
      for (int64_t j = 0; j < (two_d ? next_n : 1); ++j) {
        int64_t length = in.range(0, width);
        if (in.chance(6)) length = in.pick<int64_t>({-1, width + 1, INT32_MAX, INT32_MIN});
        // A row's end: the length itself, or (1-D with next_n) length - next_n + j + 1.
        if (length < 0 || length > width) in.valid = false;
        if (two_d) {
          lengths.set_i32({b, j}, static_cast<int32_t>(length));
        } else {
          lengths.set_i32({b}, static_cast<int32_t>(length));
        }
      }
    }
    ranges = RowRanges::decode(lengths.view, two_d ? 1 : next_n);
  }
  const TopKOptions topk_options{in.chance(128)};
  std::vector<uint8_t> workspace;
  const RunOptions options = make_run_options(
      in, workspace, [&](int threads) { return topk_per_row_cpu_workspace_size(k, threads); });
  logits.snapshot();
  ks.snapshot();
  ke.snapshot();
  lengths.snapshot();
  out.snapshot();
  const Status status = topk_per_row(out.view, logits.view, ranges, k, topk_options, options);
  expect_unchanged("topk_per_row", "logits", logits);
  expect_unchanged("topk_per_row", "ks", ks);
  expect_unchanged("topk_per_row", "ke", ke);
  expect_unchanged("topk_per_row", "lengths", lengths);
  if (in.valid && !status.ok())
    violation("topk_per_row", "refused a valid call: " + status.message());
  if (status.ok() && in.valid)
    expect_topk("topk_per_row", out, logits.view, ranges, k, topk_options.sorted);
}

void fuzz_prefill(FuzzInput& in) {
  Operands ops;
  pick_head_shape(in, ops);
  const int64_t rows = in.range(0, 4);
  const int64_t num_keys = in.range(0, 40);
  make_query(in, ops, {rows}, rows);
  const int64_t key_dim = ops.mxfp4 ? ops.head_dim / 2 : ops.head_dim;
  Tensor key_values = make_tensor(in, ops.mxfp4 ? DType::kE2M1x2 : DType::kE4M3,
                                  {num_keys, key_dim}, Fill::kRawBytes);
  Tensor key_scales =
      ops.mxfp4 ? make_tensor(in, DType::kUE8M0, {num_keys, ops.head_dim / 32}, Fill::kScaleBytes)
                : make_tensor(in, DType::kF32, {num_keys}, Fill::kKeyScales);
  const QuantizedTensor keys{key_values.view, key_scales.view};
  Tensor ks = make_tensor(in, DType::kI32, {rows}, Fill::kZero);
  Tensor ke = make_tensor(in, DType::kI32, {rows}, Fill::kZero);
  const int64_t width = std::max<int64_t>(num_keys + in.range(-1, 2), 0);
  for (int64_t t = 0; t < rows; ++t) {
    int64_t start = in.range(0, num_keys);
    int64_t end = in.range(start, num_keys);
    if (in.chance(6)) start = in.range(-2, num_keys + 2);
    if (!(start >= 0 && start <= end && end <= num_keys)) in.valid = false;
    ks.set_i32({t}, static_cast<int32_t>(start));
    ke.set_i32({t}, static_cast<int32_t>(end));
  }
  Tensor logits = make_tensor(in, DType::kF32, {rows, width}, Fill::kScores);
  bool logits_valid = in.valid;
  for (int64_t t = 0; t < rows && logits_valid; ++t) logits_valid &= ke.get<int32_t>({t}) <= width;
  const LogitsOptions logits_options{in.chance(200)};
  std::vector<uint8_t> no_workspace;
  const RunOptions logits_run = make_run_options(in, no_workspace, [](int) { return size_t{0}; });

  ops.snapshot();
  key_values.snapshot();
  key_scales.snapshot();
  ks.snapshot();
  ke.snapshot();
  logits.snapshot();
  const char* op = "mqa_logits";
  Status status = mqa_logits(logits.view, ops.q(), keys, ops.weights.view, ks.view, ke.view,
                             logits_options, logits_run);
  ops.expect_unchanged_inputs(op);
  expect_unchanged(op, "keys.values", key_values);
  expect_unchanged(op, "keys.scales", key_scales);
  expect_unchanged(op, "ks", ks);
  expect_unchanged(op, "ke", ke);
  if (logits_valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (status.ok() && logits_valid) {
    expect_untouched_outside(op, "logits", logits, rows, width);
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t start = ks.get<int32_t>({t});
      const int64_t end = ke.get<int32_t>({t});
      const std::vector<reference::Score> scores =
          reference::prefill_scores(ops.q(), keys, ops.weights.view, t, start, end);
      for (int64_t s = start; s < end; ++s) {
        expect_close(op, logits.get<float>({t, s}), scores[s - start], ops.head_dim, ops.heads, t,
                     s);
      }
      if (logits_options.clean) expect_clean_outside(op, logits, t, start, end);
    }
  }

  op = "indexer_prefill";
  const int k = pick_k(in, num_keys, kMaxTopK);
  Tensor out =
      make_tensor(in, DType::kI32, {rows, std::max(k, 1) + in.range(0, 2)}, Fill::kRawBytes);
  const TopKOptions topk_options{in.chance(128)};
  std::vector<uint8_t> workspace;
  const RunOptions options = make_run_options(
      in, workspace, [&](int threads) { return indexer_cpu_workspace_size(k, threads); });
  out.snapshot();
  status = indexer_prefill(out.view, ops.q(), keys, ops.weights.view, ks.view, ke.view, k,
                           topk_options, IndexerOptions{}, options);
  ops.expect_unchanged_inputs(op);
  expect_unchanged(op, "keys.values", key_values);
  expect_unchanged(op, "keys.scales", key_scales);
  expect_unchanged(op, "ks", ks);
  expect_unchanged(op, "ke", ke);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  expect_untouched_outside(op, "out", out, rows, k);
  expect_well_formed_rows(op, out, RowRanges::prefill(ks.view, ke.view), k);
  Tensor expected_logits = plain_tensor(DType::kF32, {rows, num_keys});
  Tensor expected = plain_tensor(DType::kI32, {rows, k});
  if (!mqa_logits(expected_logits.view, ops.q(), keys, ops.weights.view, ks.view, ke.view).ok() ||
      !topk_per_row(expected.view, expected_logits.view, RowRanges::prefill(ks.view, ke.view), k,
                    topk_options)
           .ok()) {
    violation(op, "succeeded where topk_per_row(mqa_logits) refuses the same arguments");
  }
  expect_same_rows(op, out, expected, rows, k);
}

void fuzz_decode(FuzzInput& in) {
  Operands ops;
  pick_head_shape(in, ops);
  const int64_t batch = in.range(0, 3);
  const int next_n = static_cast<int>(in.range(1, 3));
  const int64_t rows = batch * next_n;
  make_query(in, ops, {batch, next_n}, rows);

  PagedKCache cache;
  cache.format = ops.mxfp4 ? KFormat::kMXFP4 : KFormat::kFP8;
  cache.head_dim = ops.head_dim;
  cache.page_size = in.pick({1, 2, 3, 4, 16, 64});
  cache.num_pages = in.range(0, 6);
  // Page strides are multiples of 4 bytes: the page size rounded up, plus some padding.
  cache.page_stride_bytes =
      (PagedKCache::page_bytes(cache.format, cache.page_size, cache.head_dim) + 3) / 4 * 4 +
      4 * in.range(0, 2);
  if (in.chance(6)) {
    cache.page_stride_bytes -= in.pick<int64_t>({1, 4});
    in.valid = false;
  }
  Tensor pages = cache_pages(in, cache.num_pages * cache.page_stride_bytes);
  if (!ops.mxfp4) {
    // Mostly sane fp32 key scales after each page's values (raw bytes give NaN and huge values).
    for (int64_t p = 0; p < cache.num_pages; ++p) {
      for (int row = 0; row < cache.page_size; ++row) {
        if (in.random() % 8 == 0) continue;
        const float scale = palette_float(in, Fill::kKeyScales);
        const int64_t at =
            p * cache.page_stride_bytes + int64_t{cache.page_size} * cache.head_dim + row * 4;
        if (at + 4 <= static_cast<int64_t>(pages.memory.size())) {
          std::memcpy(pages.memory.data() + at, &scale, 4);
        }
      }
    }
  }
  cache.data = pages.view.data;

  const int64_t pages_per_request = in.range(0, 4);
  Tensor block_table = make_tensor(in, DType::kI32, {batch, pages_per_request}, Fill::kZero);
  const bool two_d = in.chance(96);
  Tensor context_lens = two_d ? make_tensor(in, DType::kI32, {batch, next_n}, Fill::kZero)
                              : make_tensor(in, DType::kI32, {batch}, Fill::kZero);
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t request_longest = 0;
    for (int64_t j = 0; j < (two_d ? next_n : 1); ++j) {
      int64_t length = in.range(0, pages_per_request * cache.page_size);
      if (in.chance(5)) {
        length = in.pick<int64_t>({-1, pages_per_request * cache.page_size + 1, INT32_MAX});
        in.valid = false;
      }
      request_longest = std::max(request_longest, length);
      if (two_d) {
        context_lens.set_i32({b, j}, static_cast<int32_t>(length));
      } else {
        context_lens.set_i32({b}, static_cast<int32_t>(length));
      }
    }
    longest = std::max(longest, std::min<int64_t>(request_longest, 1 << 20));
    const int64_t used_pages = (request_longest + cache.page_size - 1) / cache.page_size;
    for (int64_t p = 0; p < pages_per_request; ++p) {
      int64_t page = cache.num_pages > 0 ? in.range(0, cache.num_pages - 1) : 0;
      // Entries past what the request uses may hold anything; a used one must be a page.
      if (p >= used_pages || in.chance(5)) page = in.pick<int64_t>({-1, cache.num_pages, page});
      if (p < used_pages && (page < 0 || page >= cache.num_pages)) in.valid = false;
      block_table.set_i32({b, p}, static_cast<int32_t>(page));
    }
  }
  const int64_t width = std::max<int64_t>(longest + in.range(-1, 2), 0);
  if (width < longest) in.valid = false;
  Tensor logits = make_tensor(in, DType::kF32, {rows, width}, Fill::kScores);
  const LogitsOptions logits_options{in.chance(200)};
  std::vector<uint8_t> no_workspace;
  const RunOptions logits_run = make_run_options(in, no_workspace, [](int) { return size_t{0}; });

  ops.snapshot();
  pages.snapshot();
  block_table.snapshot();
  context_lens.snapshot();
  logits.snapshot();
  const char* op = "paged_mqa_logits";
  Status status = paged_mqa_logits(logits.view, ops.q(), cache, ops.weights.view, context_lens.view,
                                   block_table.view, logits_options, logits_run);
  ops.expect_unchanged_inputs(op);
  expect_unchanged(op, "cache", pages);
  expect_unchanged(op, "block_table", block_table);
  expect_unchanged(op, "context_lens", context_lens);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (status.ok() && in.valid) {
    expect_untouched_outside(op, "logits", logits, rows, width);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t end = reference::decode_range(context_lens.view, next_n, r).end;
      const std::vector<reference::Score> scores =
          reference::decode_scores(ops.q(), cache, ops.weights.view, block_table.view, r, 0, end);
      for (int64_t s = 0; s < end; ++s) {
        expect_close(op, logits.get<float>({r, s}), scores[s], ops.head_dim, ops.heads, r, s);
      }
      if (logits_options.clean) expect_clean_outside(op, logits, r, 0, end);
    }
  }

  op = "indexer_decode";
  const int k = pick_k(in, longest, kMaxTopK);
  Tensor out =
      make_tensor(in, DType::kI32, {rows, std::max(k, 1) + in.range(0, 2)}, Fill::kRawBytes);
  const TopKOptions topk_options{in.chance(128)};
  std::vector<uint8_t> workspace;
  const RunOptions options = make_run_options(
      in, workspace, [&](int threads) { return indexer_cpu_workspace_size(k, threads); });
  out.snapshot();
  status = indexer_decode(out.view, ops.q(), cache, ops.weights.view, context_lens.view,
                          block_table.view, k, topk_options, IndexerOptions{}, options);
  ops.expect_unchanged_inputs(op);
  expect_unchanged(op, "cache", pages);
  expect_unchanged(op, "block_table", block_table);
  expect_unchanged(op, "context_lens", context_lens);
  if (in.valid && !status.ok()) violation(op, "refused a valid call: " + status.message());
  if (!status.ok() || !in.valid) return;
  const RowRanges ranges = RowRanges::decode(context_lens.view, two_d ? 1 : next_n);
  expect_untouched_outside(op, "out", out, rows, k);
  expect_well_formed_rows(op, out, ranges, k);
  Tensor expected_logits = plain_tensor(DType::kF32, {rows, longest});
  Tensor expected = plain_tensor(DType::kI32, {rows, k});
  if (!paged_mqa_logits(expected_logits.view, ops.q(), cache, ops.weights.view, context_lens.view,
                        block_table.view)
           .ok() ||
      !topk_per_row(expected.view, expected_logits.view, ranges, k, topk_options).ok()) {
    violation(op, "succeeded where topk_per_row(paged_mqa_logits) refuses the same arguments");
  }
  expect_same_rows(op, out, expected, rows, k);
}

}  // namespace flashindexer::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace flashindexer::fuzz;
  FuzzInput in(data, size);
  switch (in.byte() % 7) {
    case 0:
      fuzz_topk(in);
      break;
    case 1:
      fuzz_prefill(in);
      break;
    case 2:
      fuzz_decode(in);
      break;
    case 3:
      fuzz_quantize(in);
      break;
    case 4:
      fuzz_kcache(in);
      break;
    case 5:
      fuzz_dcp(in);
      break;
    default:
      fuzz_row_shard(in);
      break;
  }
  return 0;
}
