// SPDX-License-Identifier: Apache-2.0
// The planning tensor ops (planning.h) on CUDA tensors against the host planner: the decode
// lengths and a prefill chunk's row bounds, bit for bit on random batches (tile boundaries of the
// kernels' scans, chunks spread over many CTAs, i32 and i64 lengths, compress ratios, DCP ranks,
// padding rows, strided native rows, token_to_seq longer than the chunk's keys), repeated runs,
// graph capture replayed with new lengths written on the device, and out-of-range device lengths
// clamped as documented without a write outside the outputs (guard words after each output).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "support/compare.h"
#include "support/cuda.h"
#include "support/prefill_cases.h"
#include "support/seed.h"

namespace fitest {
namespace {

constexpr int64_t kGuardWords = 64;  // poisoned words after every output, checked untouched

// A device i32 output of `elements` entries followed by guard words, all poisoned.
struct GuardedOutput {
  explicit GuardedOutput(int64_t elements)
      : elements(elements), buffer(static_cast<size_t>(elements + kGuardWords) * 4) {
    EXPECT_EQ(buffer.error(), cudaSuccess);
    poison();
  }
  void poison() const {
    const std::vector<int32_t> words(static_cast<size_t>(elements + kGuardWords), kPoisonIndex);
    EXPECT_EQ(cudaMemcpy(buffer.get(), words.data(), words.size() * 4, cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  TensorView view() const {
    return TensorView::contiguous(buffer.get(), DType::kI32, {elements}, Device::kCUDA);
  }
  TensorView view_2d(int64_t rows, int64_t cols, int64_t row_stride) const {
    TensorView v = TensorView::contiguous(buffer.get(), DType::kI32, {rows, cols}, Device::kCUDA);
    return v.with_row_stride(row_stride);
  }
  // The outputs' words; fails the test when a guard word changed.
  std::vector<int32_t> read() const {
    std::vector<int32_t> words(static_cast<size_t>(elements + kGuardWords));
    EXPECT_EQ(cudaMemcpy(words.data(), buffer.get(), words.size() * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    for (int64_t i = elements; i < elements + kGuardWords; ++i) {
      EXPECT_EQ(words[i], kPoisonIndex) << "guard word " << i - elements << " was written";
    }
    words.resize(static_cast<size_t>(elements));
    return words;
  }
  int64_t elements;
  DeviceBuffer buffer;
};

// Lengths on the device as i32 or i64.
struct DeviceLengths {
  DeviceLengths(const std::vector<int64_t>& values, DType dtype)
      : dtype(dtype), buffer(values.size() * 8 + 8) {
    write(values);
  }
  void write(const std::vector<int64_t>& values) const {
    std::vector<int32_t> narrow(values.begin(), values.end());
    const void* source = dtype == DType::kI64 ? static_cast<const void*>(values.data())
                                              : static_cast<const void*>(narrow.data());
    EXPECT_EQ(
        cudaMemcpy(buffer.get(), source, values.size() * dtype_size(dtype), cudaMemcpyHostToDevice),
        cudaSuccess);
    count = static_cast<int64_t>(values.size());
  }
  TensorView view() const {
    return TensorView::contiguous(buffer.get(), dtype, {count}, Device::kCUDA);
  }
  DType dtype;
  DeviceBuffer buffer;
  mutable int64_t count = 0;
};

struct Batch {
  int next_n = 1;
  std::vector<int64_t> seq_lens, query_lens;
  int64_t tokens = 0;
  RowBoundsOptions bounds;
};

Batch random_batch(Rng& rng, int64_t requests) {
  Batch batch;
  batch.next_n = static_cast<int>(rng.uniform_int(1, 4));
  const bool uniform = rng.bernoulli(0.3);
  const int64_t max_len = rng.pick(std::vector<int64_t>{8, 5000, 1 << 20});
  for (int64_t b = 0; b < requests; ++b) {
    const int64_t d = uniform ? batch.next_n : rng.uniform_int(1, batch.next_n);
    batch.seq_lens.push_back(rng.uniform_int(d, std::max<int64_t>(d, max_len)));
    batch.query_lens.push_back(d);
    batch.tokens += d;
  }
  batch.bounds.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 4, 128}));
  if (rng.bernoulli(0.4)) {
    batch.bounds.dcp = {static_cast<int>(rng.uniform_int(2, 8)),
                        static_cast<int>(rng.pick(std::vector<int64_t>{1, 2, 64}))};
    batch.bounds.dcp_rank = static_cast<int>(rng.uniform_int(0, batch.bounds.dcp.ranks - 1));
  }
  return batch;
}

// The batch's flattened and native layouts on the GPU equal the host planner's, twice.
void expect_layouts_match(Rng& rng, const Batch& batch) {
  const int64_t requests = static_cast<int64_t>(batch.seq_lens.size());
  const int64_t rows = batch.tokens + rng.uniform_int(0, 40);
  SCOPED_TRACE(::testing::Message()
               << "requests " << requests << " rows " << rows << " next_n " << batch.next_n << " R "
               << batch.bounds.compress_ratio << " dcp " << batch.bounds.dcp.ranks << "x"
               << batch.bounds.dcp.interleave << " rank " << batch.bounds.dcp_rank);
  std::vector<int32_t> want_lens(rows), want_requests(rows);
  FI_ASSERT_OK(decode_flat_lens(want_lens, want_requests, batch.seq_lens, batch.query_lens,
                                batch.next_n, batch.bounds));
  std::vector<int32_t> want_native(requests * batch.next_n);
  FI_ASSERT_OK(decode_native_lens(want_native, batch.seq_lens, batch.next_n, batch.bounds));

  const DType dtype = rng.bernoulli(0.5) ? DType::kI64 : DType::kI32;
  const DeviceLengths seq(batch.seq_lens, dtype);
  const DeviceLengths query(batch.query_lens, rng.bernoulli(0.5) ? DType::kI64 : DType::kI32);
  const GuardedOutput row_lens(rows), row_to_request(rows);
  const int64_t row_stride = batch.next_n + rng.uniform_int(0, 3);
  const GuardedOutput native(requests * row_stride);
  const bool with_requests = rng.bernoulli(0.8);
  for (int run = 0; run < 2; ++run) {
    row_lens.poison();
    row_to_request.poison();
    native.poison();
    FI_ASSERT_OK(decode_flat_lens(row_lens.view(),
                                  with_requests ? row_to_request.view() : TensorView{}, seq.view(),
                                  query.view(), batch.next_n, batch.bounds));
    FI_ASSERT_OK(decode_native_lens(native.view_2d(requests, batch.next_n, row_stride), seq.view(),
                                    batch.next_n, batch.bounds));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(row_lens.read(), want_lens) << "run " << run;
    const std::vector<int32_t> requests_got = row_to_request.read();
    if (with_requests) {
      EXPECT_EQ(requests_got, want_requests) << "run " << run;
    } else {
      EXPECT_EQ(requests_got, std::vector<int32_t>(rows, kPoisonIndex)) << "run " << run;
    }
    const std::vector<int32_t> native_got = native.read();
    for (int64_t b = 0; b < requests; ++b) {
      for (int64_t j = 0; j < row_stride; ++j) {
        const int32_t want = j < batch.next_n ? want_native[b * batch.next_n + j] : kPoisonIndex;
        ASSERT_EQ(native_got[b * row_stride + j], want) << "[" << b << ", " << j << "] run " << run;
      }
    }
  }
}

TEST(PlanningCuda, DecodeLayoutsEqualTheHostPlannerBitForBit) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  // Around the scan's tile of 512 requests, and several tiles.
  for (int64_t requests : {0, 1, 2, 31, 32, 33, 511, 512, 513, 1024, 1500, 4099}) {
    for (int trial = 0; trial < 6; ++trial) expect_layouts_match(rng, random_batch(rng, requests));
  }
  for (int trial = 0; trial < 40; ++trial) {
    expect_layouts_match(rng, random_batch(rng, rng.uniform_int(0, 3000)));
  }
}

// Lengths no host check saw: each request's length clamped to [0, 2^31 - 1], its tokens to
// [0, min(next_n, length)], rows past the output not written (planning.h).
TEST(PlanningCuda, OutOfRangeDeviceLengthsAreClampedAndStayInsideTheOutputs) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 60; ++trial) {
    const int next_n = static_cast<int>(rng.uniform_int(1, 4));
    const int64_t requests = rng.uniform_int(1, 1200);
    const bool wide = rng.bernoulli(0.5);
    std::vector<int64_t> seq_lens, query_lens;
    for (int64_t b = 0; b < requests; ++b) {
      int64_t length = rng.uniform_int(0, 3000);
      if (rng.bernoulli(0.1)) length = -rng.uniform_int(1, 1000);
      if (wide && rng.bernoulli(0.05)) length = (int64_t{1} << 33) + rng.uniform_int(0, 9);
      seq_lens.push_back(length);
      query_lens.push_back(rng.bernoulli(0.2) ? rng.uniform_int(-3, 9)
                                              : rng.uniform_int(1, next_n));
    }
    RowBoundsOptions bounds;
    bounds.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 4}));
    // The clamped batch, transcribed from planning.h.
    std::vector<int64_t> clamped_seq, clamped_query;
    int64_t tokens = 0;
    for (int64_t b = 0; b < requests; ++b) {
      const int64_t length = std::min<int64_t>(std::max<int64_t>(seq_lens[b], 0), 0x7fffffff);
      const int64_t d =
          std::min<int64_t>(std::max<int64_t>(query_lens[b], 0), std::min<int64_t>(next_n, length));
      clamped_seq.push_back(length);
      clamped_query.push_back(d);
      tokens += d;
    }
    // Sometimes fewer rows than tokens: the rows past the output are dropped.
    const int64_t rows =
        rng.bernoulli(0.5) ? tokens + rng.uniform_int(0, 9) : rng.uniform_int(0, tokens);
    std::vector<int32_t> want_lens, want_requests;
    for (int64_t b = 0; b < requests; ++b) {
      for (int64_t i = 0; i < clamped_query[b]; ++i) {
        const int64_t visible = clamped_seq[b] - clamped_query[b] + i + 1;
        want_lens.push_back(static_cast<int32_t>(visible / bounds.compress_ratio));
        want_requests.push_back(static_cast<int32_t>(b));
      }
    }
    for (int64_t pad = 0; static_cast<int64_t>(want_lens.size()) < rows; ++pad) {
      want_lens.push_back(0);
      want_requests.push_back(static_cast<int32_t>(requests + pad));
    }
    want_lens.resize(rows);
    want_requests.resize(rows);
    std::vector<int32_t> want_native;
    for (int64_t b = 0; b < requests; ++b) {
      for (int j = 0; j < next_n; ++j) {
        const int64_t visible = std::max<int64_t>(0, clamped_seq[b] - next_n + j + 1);
        want_native.push_back(static_cast<int32_t>(visible / bounds.compress_ratio));
      }
    }

    const DType dtype = wide ? DType::kI64 : DType::kI32;
    const DeviceLengths seq(seq_lens, dtype), query(query_lens, dtype);
    const GuardedOutput row_lens(rows), row_to_request(rows), native(requests * next_n);
    FI_ASSERT_OK(decode_flat_lens(row_lens.view(), row_to_request.view(), seq.view(), query.view(),
                                  next_n, bounds));
    FI_ASSERT_OK(
        decode_native_lens(native.view_2d(requests, next_n, next_n), seq.view(), next_n, bounds));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(row_lens.read(), want_lens);
    EXPECT_EQ(row_to_request.read(), want_requests);
    EXPECT_EQ(native.read(), want_native);
  }
}

// Captured once; the lengths are rewritten on the device between replays (as an engine's
// step-to-step metadata update does) and every replay gives the host planner's layouts for the
// lengths the device held.
TEST(PlanningCuda, GraphReplayReadsTheLengthsTheDeviceHolds) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  constexpr int64_t kRequests = 700;
  Batch batch = random_batch(rng, kRequests);
  const int next_n = batch.next_n;
  const int64_t rows = kRequests * next_n;  // room for every request's full next_n tokens
  const DeviceLengths seq(batch.seq_lens, DType::kI32), query(batch.query_lens, DType::kI32);
  const GuardedOutput row_lens(rows), row_to_request(rows), native(kRequests * next_n);
  CapturedGraph graph;
  FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
    RunOptions options;
    options.cuda_stream = stream;
    const Status flat = decode_flat_lens(row_lens.view(), row_to_request.view(), seq.view(),
                                         query.view(), next_n, batch.bounds, options);
    if (!flat.ok()) return flat;
    return decode_native_lens(native.view_2d(kRequests, next_n, next_n), seq.view(), next_n,
                              batch.bounds, options);
  }));
  for (int step = 0; step < 4; ++step) {
    if (step > 0) {  // the next step: every request grows by its tokens, new token counts
      batch.tokens = 0;
      for (int64_t b = 0; b < kRequests; ++b) {
        batch.query_lens[b] = rng.uniform_int(1, next_n);
        batch.seq_lens[b] += batch.query_lens[b];
        batch.tokens += batch.query_lens[b];
      }
      seq.write(batch.seq_lens);
      query.write(batch.query_lens);
    }
    row_lens.poison();
    row_to_request.poison();
    native.poison();
    ASSERT_EQ(graph.replay(1), cudaSuccess);
    std::vector<int32_t> want_lens(rows), want_requests(rows), want_native(kRequests * next_n);
    FI_ASSERT_OK(decode_flat_lens(want_lens, want_requests, batch.seq_lens, batch.query_lens,
                                  next_n, batch.bounds));
    FI_ASSERT_OK(decode_native_lens(want_native, batch.seq_lens, next_n, batch.bounds));
    EXPECT_EQ(row_lens.read(), want_lens) << "step " << step;
    EXPECT_EQ(row_to_request.read(), want_requests) << "step " << step;
    EXPECT_EQ(native.read(), want_native) << "step " << step;
  }
}

// ---------------------------------------------------------------------------------------------
// A prefill chunk's row bounds

// The chunk's bounds from lengths no host check saw, restated from planning.h: S clamped to
// [0, 2^31 - 1], M to [0, S]; rows past the lengths' queries 0 / 0 and token_to_seq entries past
// the chunk's keys -1; each value stored as i32. For valid lengths, the host op's bounds.
ChunkBounds clamped_chunk_bounds(const std::vector<int64_t>& seq_lens,
                                 const std::vector<int64_t>& query_lens, const PrefillChunk& chunk,
                                 int64_t entries, const RowBoundsOptions& bounds) {
  const int64_t rows = chunk.query_end - chunk.query_begin;
  ChunkBounds out{std::vector<int32_t>(rows, 0), std::vector<int32_t>(rows, 0),
                  std::vector<int32_t>(entries, -1)};
  const auto local = [&](int64_t length) {
    return bounds.dcp.ranks == 1 ? length : dcp_local_len(length, bounds.dcp_rank, bounds.dcp);
  };
  int64_t group_query = 0;
  int64_t key = 0;
  for (int64_t r = chunk.request_begin; r < chunk.request_end; ++r) {
    const int64_t seq_len = std::clamp<int64_t>(seq_lens[r], 0, 0x7fffffff);
    const int64_t queries = std::clamp<int64_t>(query_lens[r], 0, seq_len);
    const int64_t keys = local(seq_len / bounds.compress_ratio);
    for (int64_t g = std::max(group_query, chunk.query_begin);
         g < std::min(group_query + queries, chunk.query_end); ++g) {
      const int64_t position = seq_len - queries + (g - group_query);
      out.ks[g - chunk.query_begin] = static_cast<int32_t>(key);
      out.ke[g - chunk.query_begin] =
          static_cast<int32_t>(key + local((position + 1) / bounds.compress_ratio));
    }
    for (int64_t s = key; s < std::min(key + keys, entries); ++s) {
      out.token_to_seq[s] = static_cast<int32_t>(r - chunk.request_begin);
    }
    group_query += queries;
    key += keys;
  }
  return out;
}

// Runs the op on the chunk twice and compares with `want`; token_to_seq of `entries` entries or
// none.
void expect_chunk_bounds(const PrefillChunk& chunk, const DeviceLengths& seq,
                         const DeviceLengths& query, const RowBoundsOptions& bounds,
                         const ChunkBounds& want, bool with_tokens) {
  const int64_t rows = chunk.query_end - chunk.query_begin;
  const auto entries = static_cast<int64_t>(want.token_to_seq.size());
  const GuardedOutput ks(rows), ke(rows), token_to_seq(entries);
  for (int run = 0; run < 2; ++run) {
    ks.poison();
    ke.poison();
    token_to_seq.poison();
    FI_ASSERT_OK(build_prefill_row_bounds(ks.view(), ke.view(),
                                          with_tokens ? token_to_seq.view() : TensorView{}, chunk,
                                          seq.view(), query.view(), bounds));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(ks.read(), want.ks) << "run " << run;
    EXPECT_EQ(ke.read(), want.ke) << "run " << run;
    EXPECT_EQ(token_to_seq.read(),
              with_tokens ? want.token_to_seq : std::vector<int32_t>(entries, kPoisonIndex))
        << "run " << run;
  }
}

TEST(PlanningCuda, PrefillRowBoundsEqualTheHostOpBitForBit) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Shape {
    int64_t min_requests, max_requests, max_len, max_workspace_keys;
  };
  // Small chunks; chunks of hundreds to thousands of short requests (several tiles of the scan);
  // a few long requests whose rows and keys spread over many CTAs.
  for (const Shape& shape : {Shape{1, 12, 300, 200}, Shape{400, 1600, 40, int64_t{1} << 22},
                             Shape{1, 6, 200000, int64_t{1} << 22}}) {
    for (int trial = 0; trial < 12; ++trial) {
      const PrefillBatch batch =
          random_prefill_batch(rng, shape.max_requests, shape.max_len, shape.min_requests);
      const RowBoundsOptions bounds = random_bounds_options(rng);
      const DeviceLengths seq(batch.seq_lens, rng.bernoulli(0.5) ? DType::kI64 : DType::kI32);
      const DeviceLengths query(batch.query_lens, rng.bernoulli(0.5) ? DType::kI64 : DType::kI32);
      for (const PrefillChunk& chunk :
           plan_prefill_batch(rng, batch, bounds.compress_ratio, shape.max_workspace_keys)) {
        SCOPED_TRACE(::testing::Message()
                     << "requests [" << chunk.request_begin << ", " << chunk.request_end
                     << ") rows [" << chunk.query_begin << ", " << chunk.query_end << ") R "
                     << bounds.compress_ratio << " dcp " << bounds.dcp.ranks << "x"
                     << bounds.dcp.interleave << " rank " << bounds.dcp_rank);
        const int64_t rows = chunk.query_end - chunk.query_begin;
        const int64_t keys = chunk_workspace_keys(chunk, batch.seq_lens, bounds);
        ChunkBounds want{std::vector<int32_t>(rows), std::vector<int32_t>(rows),
                         std::vector<int32_t>(keys)};
        FI_ASSERT_OK(build_prefill_row_bounds(want.ks, want.ke, want.token_to_seq, chunk,
                                              batch.seq_lens, batch.query_lens, bounds));
        // A token_to_seq longer than the chunk's keys: the entries past them name no request.
        if (rng.bernoulli(0.3)) want.token_to_seq.resize(keys + rng.uniform_int(1, 40), -1);
        expect_chunk_bounds(chunk, seq, query, bounds, want, rng.bernoulli(0.8));
      }
    }
  }
}

// Lengths no host check saw, for a chunk planned over other lengths: clamped, rows past them
// empty, and no write outside the outputs.
TEST(PlanningCuda, PrefillRowBoundsFromOutOfRangeLengthsStayInsideTheOutputs) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 60; ++trial) {
    const PrefillBatch planned = random_prefill_batch(rng, 900, 400);
    const RowBoundsOptions bounds = random_bounds_options(rng);
    const bool wide = rng.bernoulli(0.5);
    std::vector<int64_t> seq_lens = planned.seq_lens, query_lens = planned.query_lens;
    for (size_t r = 0; r < seq_lens.size(); ++r) {
      if (rng.bernoulli(0.1)) seq_lens[r] = -rng.uniform_int(1, 1000);
      if (rng.bernoulli(0.1)) query_lens[r] = rng.uniform_int(-5, 2000);
      if (wide && rng.bernoulli(0.02)) seq_lens[r] = (int64_t{1} << 33) + rng.uniform_int(0, 9);
      if (wide && rng.bernoulli(0.02)) query_lens[r] = int64_t{1} << 34;
    }
    const DeviceLengths seq(seq_lens, wide ? DType::kI64 : DType::kI32);
    const DeviceLengths query(query_lens, wide ? DType::kI64 : DType::kI32);
    for (const PrefillChunk& chunk : plan_prefill_batch(rng, planned, bounds.compress_ratio,
                                                        rng.bernoulli(0.5) ? 300 : 1 << 20)) {
      const int64_t entries = rng.uniform_int(0, 3000);
      expect_chunk_bounds(chunk, seq, query, bounds,
                          clamped_chunk_bounds(seq_lens, query_lens, chunk, entries, bounds),
                          rng.bernoulli(0.8));
    }
  }
}

// Captured once; each replay reads the lengths the device holds then (a chunk of the same rows
// whose requests grew).
TEST(PlanningCuda, PrefillRowBoundsReplayWithTheLengthsTheDeviceHolds) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillBatch batch = random_prefill_batch(rng, 40, 3000, 20);
  const RowBoundsOptions bounds = random_bounds_options(rng);
  PrefillChunk chunk;
  chunk.request_begin = 0;
  chunk.request_end = static_cast<int32_t>(batch.seq_lens.size());
  for (const int64_t m : batch.query_lens) chunk.query_end += m;
  const int64_t rows = chunk.query_end;
  const int64_t entries = 40 * 3000 * 4;  // room for the keys of every step below
  const DeviceLengths seq(batch.seq_lens, DType::kI32), query(batch.query_lens, DType::kI32);
  const GuardedOutput ks(rows), ke(rows), token_to_seq(entries);
  CapturedGraph graph;
  FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
    RunOptions options;
    options.cuda_stream = stream;
    return build_prefill_row_bounds(ks.view(), ke.view(), token_to_seq.view(), chunk, seq.view(),
                                    query.view(), bounds, options);
  }));
  for (int step = 0; step < 4; ++step) {
    if (step > 0) {  // the same query rows, each request's context grown
      for (int64_t& s : batch.seq_lens) s += rng.uniform_int(0, 2000);
      seq.write(batch.seq_lens);
    }
    ks.poison();
    ke.poison();
    token_to_seq.poison();
    ASSERT_EQ(graph.replay(1), cudaSuccess);
    const ChunkBounds want =
        clamped_chunk_bounds(batch.seq_lens, batch.query_lens, chunk, entries, bounds);
    // The restatement is the host op's bounds on valid lengths.
    PrefillChunk planned = chunk;
    planned.num_keys = 0;
    for (const int64_t s : batch.seq_lens) planned.num_keys += s / bounds.compress_ratio;
    std::vector<int32_t> host_ks(rows), host_ke(rows);
    FI_ASSERT_OK(build_prefill_row_bounds(host_ks, host_ke, {}, planned, batch.seq_lens,
                                          batch.query_lens, bounds));
    ASSERT_EQ(host_ks, want.ks);
    ASSERT_EQ(host_ke, want.ke);
    EXPECT_EQ(ks.read(), want.ks) << "step " << step;
    EXPECT_EQ(ke.read(), want.ke) << "step " << step;
    EXPECT_EQ(token_to_seq.read(), want.token_to_seq) << "step " << step;
  }
}

TEST(PlanningCuda, RejectsLengthsOnAnotherDevice) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  std::vector<int32_t> host_lens = {5, 6};
  const TensorView seq = TensorView::contiguous(host_lens.data(), DType::kI32, {2});
  const TensorView device_rows =
      labelled_cuda(TensorView::contiguous(host_lens.data(), DType::kI32, {2}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(device_rows, {}, seq, seq, 2),
                         StatusCode::kInvalidArgument, {"row_lens"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(device_rows, {}, labelled_cuda(seq), seq, 2),
                         StatusCode::kInvalidArgument, {"query_lens"}));
}

}  // namespace
}  // namespace fitest
