// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's optional outputs (indexer.h): on the dense path, the fused path (gated rows,
// forced candidate overflow into its fallback) and the dense consumer, the selected scores are
// the bits the GPU's mqa_logits / paged_mqa_logits write at the selected columns (the fused
// path's documented -0 / NaN corner aside), and a source layer's candidate blocks, on the dense
// and the fused path, are select_candidate_blocks over the GPU's logits, while the top-k stays
// the plain call's. Outputs
// are poisoned before each run; a second run gives the same bits.
#include "support/indexer_outputs.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "indexer_cases.h"
#include "mxfp4_cases.h"

namespace fitest {
namespace {

using flashindexer::cuda::FusedConfig;

// The GPU's own logits of a problem, on the host.
template <typename DeviceProblem>
HostTensor gpu_logits(const DeviceProblem& device, int64_t rows, int64_t width) {
  HostTensor logits = poisoned_logits(rows, width);
  DeviceTensor device_logits = to_device(logits);
  const Status status = device.run(device_logits, true);
  EXPECT_TRUE(status.ok()) << status_text(status);
  to_host(logits, device_logits);
  return logits;
}

// What one indexer call returned.
struct Outputs {
  HostTensor out;
  HostTensor scores;
  HostTensor blocks;
};

// Poisoned outputs on the device: out [rows, k] (row stride k + 3), scores [rows, k] (stride
// k + 1) when asked, blocks [rows, C] (stride C + 2) when C > 0.
struct DeviceOutputs {
  HostTensor out;
  HostTensor scores;
  HostTensor blocks;
  DeviceTensor device_out;
  DeviceTensor device_scores;
  DeviceTensor device_blocks;
  DeviceOutputs(int64_t rows, int k, bool with_scores, int num_blocks)
      : out(poisoned_topk_output(rows, k, k + 3)),
        scores(poisoned_scores(rows, k, k + 1)),
        blocks(poisoned_topk_output(rows, std::max(num_blocks, 1), std::max(num_blocks, 1) + 2)),
        device_out(to_device(out)),
        device_scores(to_device(scores)),
        device_blocks(to_device(blocks)),
        with_scores_(with_scores),
        num_blocks_(num_blocks) {}
  IndexerOptions options(IndexerPath path, int block_size) const {
    IndexerOptions o;
    o.path = path;
    if (with_scores_) o.scores = device_scores.view;
    if (num_blocks_ > 0) o.candidate_source = CandidateOutput{device_blocks.view, block_size};
    return o;
  }
  Outputs fetch() {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(out, device_out);
    to_host(scores, device_scores);
    to_host(blocks, device_blocks);
    Outputs o{std::move(out), std::move(scores), std::move(blocks)};
    return o;
  }

 private:
  bool with_scores_;
  int num_blocks_;
};

::testing::AssertionResult SameBits(const HostTensor& a, const HostTensor& b) {
  if (a.byte_size() != b.byte_size() || std::memcmp(a.bytes(), b.bytes(), a.byte_size()) != 0) {
    return ::testing::AssertionFailure() << "a repeated run wrote different bytes";
  }
  return ::testing::AssertionSuccess();
}

// ----------------------------------------------------------------------------- scores, prefill

// One prefill run: the public op on `path`, or (capacity > 0) the fused entry with that many
// candidate slots, so that gated rows overflow into the fallback.
Outputs prefill_with_outputs(const DevicePrefill& device, int64_t rows, int k, bool sorted,
                             const DeviceBuffer& workspace, IndexerPath path, int capacity,
                             bool with_scores, int num_blocks = 0, int block_size = 0) {
  DeviceOutputs d(rows, k, with_scores, num_blocks);
  const IndexerOptions o = d.options(path, block_size);
  const Status status =
      capacity > 0
          ? flashindexer::cuda::fused_indexer_prefill(
                d.device_out.view, device.q.view(), device.keys.view(), device.weights.view,
                device.ks.view, device.ke.view, k, sorted, with_workspace(workspace),
                FusedConfig{capacity}, o.scores, o.candidate_source)
          : indexer_prefill(d.device_out.view, device.q.view(), device.keys.view(),
                            device.weights.view, device.ks.view, device.ke.view, k,
                            TopKOptions{sorted}, o, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  return d.fetch();
}

// One run of a prefill problem's checks: the path, the workspace's batch of rows (0: the
// recommended size) and, with capacity > 0, the fused entry with that many slots (overflow; fewer
// than k at k >= 2048: no gated row is ever complete).
struct PrefillRun {
  IndexerPath path;
  int64_t batch_rows;
  int capacity;
};

// The run's top-k is `expected` (the top-k of the GPU's `logits`), each selected key's score
// their bits (the fused path's -0.0 / NaN corner aside), and a repeat writes the same bytes.
void expect_prefill_scores_are_the_logits_bits(const DevicePrefill& device, const PrefillProblem& p,
                                               const HostTensor& logits, const HostTensor& expected,
                                               int k, bool sorted, const PrefillRun& run) {
  SCOPED_TRACE(::testing::Message() << path_name(run.path) << " batch rows " << run.batch_rows
                                    << " capacity " << run.capacity);
  const DeviceBuffer workspace = run.capacity > 0
                                     ? fused_workspace(k, 0, p.num_keys, run.capacity)
                                     : path_workspace(run.path, k, run.batch_rows, p.num_keys);
  auto start = [&](int64_t t) { return static_cast<int64_t>(p.ks.data<int32_t>()[t]); };
  Outputs first =
      prefill_with_outputs(device, p.rows, k, sorted, workspace, run.path, run.capacity, true);
  EXPECT_TRUE(SameTopK(first.out, expected, k, sorted));
  EXPECT_TRUE(ScoresAreTheLogitsBits(
      first.scores, first.out, logits, k, start,
      run.path == IndexerPath::kFused ? ScoreBits::kFusedKeys : ScoreBits::kExact));
  Outputs again =
      prefill_with_outputs(device, p.rows, k, sorted, workspace, run.path, run.capacity, true);
  EXPECT_TRUE(SameBits(first.out, again.out));
  EXPECT_TRUE(SameBits(first.scores, again.scores));
}

TEST(IndexerScoresCuda, PrefillScoresAreTheLogitsBitsOnEveryPath) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int k : {1, 64, 512, 2048}) {
    for (int variant = 0; variant < 2; ++variant) {
      const int heads = index++ % 2 == 0 ? 64 : 32;
      const int64_t rows = rng.uniform_int(20, 70);
      // Long rows gate the fused path (more keys than its candidate slots); short ones do not.
      const int64_t keys =
          variant == 0 ? rng.uniform_int(20000, 40000) : rng.uniform_int(300, 3000);
      const bool sorted = rng.bernoulli(0.5);
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " k=" << k << " rows=" << rows
                                        << " keys=" << keys << (sorted ? " sorted" : ""));
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
      pack_requests(rng, p, 8);
      zero_keys(rng, p.keys, KFormat::kFP8, 128, keys, keys / 16);
      huge_weights(rng, p.weights, 3);
      const DevicePrefill device(p);
      const HostTensor logits = gpu_logits(device, rows, keys);
      HostTensor expected = poisoned_topk_output(rows, k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::prefill(p.ks.view(), p.ke.view()), k,
                                TopKOptions{sorted}));
      for (const PrefillRun& run :
           {PrefillRun{IndexerPath::kDense, 0, 0}, PrefillRun{IndexerPath::kDense, 5, 0},
            PrefillRun{IndexerPath::kFused, 0, 0}, PrefillRun{IndexerPath::kFused, 7, 0},
            PrefillRun{IndexerPath::kFused, 0, k <= 64 ? 300 : 1000}}) {
        expect_prefill_scores_are_the_logits_bits(device, p, logits, expected, k, sorted, run);
      }
    }
  }
}

// ----------------------------------------------------------------------------- scores, decode

Outputs decode_with_outputs(const DevicePaged& device, int64_t rows, int k, bool sorted,
                            const DeviceBuffer& workspace, IndexerPath path, bool with_scores,
                            int num_blocks = 0, int block_size = 0) {
  DeviceOutputs d(rows, k, with_scores, num_blocks);
  const Status status =
      indexer_decode(d.device_out.view, device.q.view(), device.cache.cache, device.weights.view,
                     device.context_lens.view, device.block_table.view, k, TopKOptions{sorted},
                     d.options(path, block_size), with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  return d.fetch();
}

DecodeConfig cuda_decode_config(Rng& rng, int next_n, bool two_dim, int64_t max_len) {
  DecodeConfig config;
  config.heads = rng.bernoulli(0.5) ? 32 : 64;
  config.batch = static_cast<int>(rng.uniform_int(1, 12));
  config.next_n = next_n;
  config.two_dim_lens = two_dim;
  config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{32, 64}));
  config.max_len = max_len;
  return config;
}

// A decode problem on both paths: the top-k of the GPU's logits, with each selected key's score
// their bits (the fused path's -0.0 / NaN corner aside), and a repeat writes the same bytes.
void expect_decode_scores_are_the_logits_bits(DecodeProblem& p, int k) {
  const DevicePaged device(p);
  const int64_t width = p.block_table.size(1) * p.config.page_size;
  const HostTensor logits = gpu_logits(device, p.rows(), width);
  HostTensor expected = poisoned_topk_output(p.rows(), k);
  FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                            RowRanges::decode(p.context_lens.view(), p.config.next_n), k,
                            TopKOptions{true}));
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, k, 0, width);
    Outputs got = decode_with_outputs(device, p.rows(), k, true, workspace, path, true);
    EXPECT_TRUE(SameTopK(got.out, expected, k, true));
    EXPECT_TRUE(ScoresAreTheLogitsBits(
        got.scores, got.out, logits, k, [](int64_t) { return int64_t{0}; },
        path == IndexerPath::kFused ? ScoreBits::kFusedKeys : ScoreBits::kExact));
    Outputs again = decode_with_outputs(device, p.rows(), k, true, workspace, path, true);
    EXPECT_TRUE(SameBits(got.out, again.out));
    EXPECT_TRUE(SameBits(got.scores, again.scores));
  }
}

TEST(IndexerScoresCuda, DecodeScoresAreThePagedLogitsBitsForNextN1To4) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      const DecodeConfig config =
          cuda_decode_config(rng, next_n, two_dim, rng.pick(std::vector<int64_t>{600, 20000}));
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{16, 512, 2048}));
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      huge_weights(rng, p.weights, 2);
      expect_decode_scores_are_the_logits_bits(p, k);
    }
  }
}

// MXFP4 on every path, some query vectors out of span (and, at decode, some of one request's
// keys): the scores are the logits' bits, the fix-up's where a vector is out of span, which the
// fused path's rows meeting one get from its fallback; repeats write the same bytes.
TEST(IndexerScoresCuda, Mxfp4ScoresAreTheLogitsBitsOnEveryPath) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    const int k = heads == 32 ? 512 : 64;
    const int64_t rows = rng.uniform_int(30, 60);
    const int64_t keys = rng.uniform_int(12000, 20000);
    SCOPED_TRACE(::testing::Message()
                 << "prefill H=" << heads << " rows=" << rows << " keys=" << keys);
    PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, 128);
    pack_requests(rng, p, 8);
    spread_scales(p.q, rows * heads, 2, 97);
    const DevicePrefill device(p);
    const HostTensor logits = gpu_logits(device, rows, keys);
    HostTensor expected = poisoned_topk_output(rows, k);
    FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                              RowRanges::prefill(p.ks.view(), p.ke.view()), k, TopKOptions{true}));
    for (const PrefillRun& run :
         {PrefillRun{IndexerPath::kDense, 0, 0}, PrefillRun{IndexerPath::kFused, 0, 0},
          PrefillRun{IndexerPath::kFused, 0, 1000}}) {
      expect_prefill_scores_are_the_logits_bits(device, p, logits, expected, k, true, run);
    }
  }
  for (int next_n : {1, 3}) {
    DecodeConfig config = cuda_decode_config(rng, next_n, false, 20000);
    config.format = KFormat::kMXFP4;
    const int k = 256;
    SCOPED_TRACE(describe(config));
    DecodeProblem p = make_decode_problem(rng, config);
    spread_scales(p.q, p.rows() * config.heads, 1, 131);
    Operand& first_keys = p.request_keys[0];
    spread_scales(first_keys, first_keys.values.size(0), first_keys.values.size(0) / 2, 700);
    rewrite_cache(p);
    expect_decode_scores_are_the_logits_bits(p, k);
  }
}

// ----------------------------------------------------------------------------- scores, consumer

TEST(IndexerScoresCuda, ExactConsumerScoresAreTheLogitsBitsOfItsSelection) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int k = 128;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 40, 6000, 32, 128);
  pack_requests(rng, p, 8);
  const DevicePrefill device(p);
  const HostTensor logits = gpu_logits(device, p.rows, p.num_keys);
  HostTensor cand(DType::kI32, {p.rows, 64});
  FI_ASSERT_OK(select_candidate_blocks(cand.view(), logits.view(),
                                       CandidateRows::prefill(p.ks.view(), p.ke.view()), 64, 8));
  const DeviceTensor device_cand = to_device(cand);
  const DeviceBuffer workspace = indexer_workspace(k, 6, p.num_keys);
  DeviceOutputs d(p.rows, k, true, 0);
  IndexerOptions o = d.options(IndexerPath::kAuto, 0);
  o.candidates = CandidateInput{device_cand.view, 8, false};
  FI_ASSERT_OK(indexer_prefill(d.device_out.view, device.q.view(), device.keys.view(),
                               device.weights.view, device.ks.view, device.ke.view, k,
                               TopKOptions{true}, o, with_workspace(workspace)));
  Outputs got = d.fetch();
  HostTensor expected = poisoned_topk_output(p.rows, k);
  HostTensor host_logits = poisoned_logits(p.rows, p.num_keys);
  std::memcpy(host_logits.bytes(), logits.bytes(), logits.byte_size());
  FI_ASSERT_OK(candidate_topk_per_row(expected.view(), host_logits.view(),
                                      CandidateRows::prefill(p.ks.view(), p.ke.view()), cand.view(),
                                      8, k, CandidateTopKOptions{true, false}));
  EXPECT_TRUE(SameTopK(got.out, expected, k, true));
  EXPECT_TRUE(ScoresAreTheLogitsBits(got.scores, got.out, logits, k, [&](int64_t t) {
    return static_cast<int64_t>(p.ks.data<int32_t>()[t]);
  }));

  // Decode, next_n 2: a request's rows share one candidate row.
  DecodeProblem dp = make_decode_problem(rng, cuda_decode_config(rng, 2, false, 3000));
  const DevicePaged paged(dp);
  const int64_t width = dp.block_table.size(1) * dp.config.page_size;
  const HostTensor dlogits = gpu_logits(paged, dp.rows(), width);
  const HostTensor ends = decode_row_ends(dp.ends);
  HostTensor dcand(DType::kI32, {dp.rows(), 32});
  FI_ASSERT_OK(select_candidate_blocks(dcand.view(), dlogits.view(),
                                       CandidateRows::decode(ends.view()), 32, 8));
  const DeviceTensor device_dcand = to_device(dcand);
  const DeviceBuffer decode_workspace = indexer_workspace(k);
  DeviceOutputs dd(dp.rows(), k, true, 0);
  IndexerOptions decode_options = dd.options(IndexerPath::kAuto, 0);
  decode_options.candidates = CandidateInput{device_dcand.view, 8, false};
  FI_ASSERT_OK(indexer_decode(dd.device_out.view, paged.q.view(), paged.cache.cache,
                              paged.weights.view, paged.context_lens.view, paged.block_table.view,
                              k, TopKOptions{false}, decode_options,
                              with_workspace(decode_workspace)));
  Outputs dgot = dd.fetch();
  EXPECT_TRUE(ScoresAreTheLogitsBits(dgot.scores, dgot.out, dlogits, k,
                                     [](int64_t) { return int64_t{0}; }));
}

// ----------------------------------------------------------------------------- candidate output

// A workspace of the recommended size for a candidate output, or (batch_rows > 0) one that holds
// about batch_rows rows of logits and block scores (many batches).
DeviceBuffer source_workspace(int k, int num_blocks, int block_size, int64_t batch_rows,
                              int64_t width) {
  IndexerOptions o;
  HostTensor shape(DType::kI32, {1, num_blocks});
  o.candidate_source = CandidateOutput{shape.view(), block_size};
  size_t bytes = indexer_cuda_workspace_size(k, o);
  if (batch_rows > 0) {
    const int64_t blocks = (width + block_size - 1) / block_size;
    bytes = flashindexer::cuda::topk_per_row_workspace_bound(std::max(k, num_blocks)) + 4 * 1024 +
            batch_rows * (((width + 255) / 256 * 256) * 4 + (blocks + 63) / 64 * 256 + 260);
  }
  return poisoned_device_buffer(bytes);
}

// A workspace in which the fused path's own entry, with `capacity` candidate slots, runs
// batch_rows rows a batch with a candidate output.
DeviceBuffer fused_source_workspace(int k, int num_blocks, int block_size, int64_t batch_rows,
                                    int64_t width, int capacity) {
  const int64_t blocks = (width + block_size - 1) / block_size;
  return poisoned_device_buffer(
      flashindexer::cuda::fused_indexer_workspace_size(batch_rows, width, std::max(k, num_blocks),
                                                       FusedConfig{capacity}) +
      batch_rows * ((blocks + 63) / 64 * 256 + 4) + 4 * 1024);
}

TEST(IndexerCandidateSourceCuda, PrefillPublishesSelectCandidateBlocksOfTheGpuLogits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Shape {
    int k;
    int num_blocks;
    int block_size;
  };
  for (const Shape& s :
       {Shape{512, 2048, 8}, Shape{64, 16, 8}, Shape{2048, 4096, 16}, Shape{256, 512, 32},
        Shape{128, 100, 24}, Shape{128, 300, 5}, Shape{4096, 64, 1}}) {
    const int heads = rng.bernoulli(0.5) ? 64 : 32;
    const int64_t rows = rng.uniform_int(10, 50);
    const int64_t keys = rng.uniform_int(2000, 30000);
    SCOPED_TRACE(::testing::Message()
                 << "H=" << heads << " k=" << s.k << " C=" << s.num_blocks << " cb=" << s.block_size
                 << " rows=" << rows << " keys=" << keys);
    PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
    pack_requests(rng, p, s.block_size);
    zero_keys(rng, p.keys, KFormat::kFP8, 128, keys, keys / 8);
    huge_weights(rng, p.weights, 2);
    const DevicePrefill device(p);
    const HostTensor logits = gpu_logits(device, rows, keys);
    HostTensor expected_blocks = poisoned_topk_output(rows, s.num_blocks);
    FI_ASSERT_OK(select_candidate_blocks(expected_blocks.view(), logits.view(),
                                         CandidateRows::prefill(p.ks.view(), p.ke.view()),
                                         s.num_blocks, s.block_size));
    HostTensor expected = poisoned_topk_output(rows, s.k);
    FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                              RowRanges::prefill(p.ks.view(), p.ke.view()), s.k,
                              TopKOptions{true}));
    // kAuto with long rows: the fused path for block sizes of a multiple of 8, else the dense.
    // The fused path's own entry with few candidate slots sends rows to its fallback.
    struct Run {
      IndexerPath path;
      int capacity;
    };
    std::vector<Run> runs = {{IndexerPath::kDense, 0}, {IndexerPath::kAuto, 0}};
    if (s.block_size % 8 == 0) runs.push_back({IndexerPath::kFused, s.k <= 64 ? 300 : 1000});
    for (const Run& run : runs) {
      for (int64_t batch_rows : {int64_t{0}, int64_t{3}}) {
        const bool with_scores = batch_rows > 0;
        SCOPED_TRACE(::testing::Message()
                     << path_name(run.path) << " capacity " << run.capacity << " batch rows "
                     << batch_rows << (with_scores ? " with scores" : ""));
        const DeviceBuffer workspace =
            run.capacity > 0 ||
                    (run.path != IndexerPath::kDense && batch_rows > 0 && s.block_size % 8 == 0)
                ? fused_source_workspace(s.k, s.num_blocks, s.block_size,
                                         batch_rows > 0 ? batch_rows : rows, keys, run.capacity)
                : source_workspace(s.k, s.num_blocks, s.block_size, batch_rows, keys);
        DeviceOutputs d(rows, s.k, with_scores, s.num_blocks);
        IndexerOptions o = d.options(run.path, s.block_size);
        o.min_row_keys = 1 << 20;
        const Status status =
            run.capacity > 0
                ? flashindexer::cuda::fused_indexer_prefill(
                      d.device_out.view, device.q.view(), device.keys.view(), device.weights.view,
                      device.ks.view, device.ke.view, s.k, true, with_workspace(workspace),
                      FusedConfig{run.capacity}, o.scores, o.candidate_source)
                : indexer_prefill(d.device_out.view, device.q.view(), device.keys.view(),
                                  device.weights.view, device.ks.view, device.ke.view, s.k,
                                  TopKOptions{true}, o, with_workspace(workspace));
        FI_ASSERT_OK(status);
        Outputs got = d.fetch();
        EXPECT_TRUE(SameTopK(got.out, expected, s.k, true));
        EXPECT_TRUE(SameBlocks(got.blocks, expected_blocks, s.num_blocks));
        if (with_scores) {
          EXPECT_TRUE(ScoresAreTheLogitsBits(got.scores, got.out, logits, s.k, [&](int64_t t) {
            return static_cast<int64_t>(p.ks.data<int32_t>()[t]);
          }));
        }
      }
    }
  }
}

TEST(IndexerCandidateSourceCuda, DecodePublishesSelectCandidateBlocksForNextN1To4) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      const DecodeConfig config =
          cuda_decode_config(rng, next_n, two_dim, rng.pick(std::vector<int64_t>{50, 5000}));
      const int k = static_cast<int>(rng.pick(std::vector<int64_t>{32, 512}));
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{16, 2048}));
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k) +
                   " C=" + std::to_string(num_blocks));
      DecodeProblem p = make_decode_problem(rng, config);
      const DevicePaged device(p);
      const int64_t width = p.block_table.size(1) * config.page_size;
      const HostTensor logits = gpu_logits(device, p.rows(), width);
      const HostTensor ends = decode_row_ends(p.ends);
      HostTensor expected = poisoned_topk_output(p.rows(), k);
      FI_ASSERT_OK(topk_per_row(expected.view(), logits.view(),
                                RowRanges::decode(p.context_lens.view(), next_n), k,
                                TopKOptions{false}));
      // Block size 8 (the fused scan stores floats) and 16 (it folds keys atomically).
      for (int block_size : {8, 16}) {
        HostTensor expected_blocks = poisoned_topk_output(p.rows(), num_blocks);
        FI_ASSERT_OK(select_candidate_blocks(expected_blocks.view(), logits.view(),
                                             CandidateRows::decode(ends.view()), num_blocks,
                                             block_size));
        for (IndexerPath path : kPaths) {
          for (int64_t batch_rows : {int64_t{0}, int64_t{next_n}}) {
            SCOPED_TRACE(::testing::Message() << path_name(path) << " cb " << block_size
                                              << " batch rows " << batch_rows);
            const DeviceBuffer workspace =
                path == IndexerPath::kFused && batch_rows > 0
                    ? fused_source_workspace(k, num_blocks, block_size, batch_rows, width, 0)
                    : source_workspace(k, num_blocks, block_size, batch_rows, width);
            Outputs got = decode_with_outputs(device, p.rows(), k, false, workspace, path, true,
                                              num_blocks, block_size);
            EXPECT_TRUE(SameTopK(got.out, expected, k, false));
            EXPECT_TRUE(SameBlocks(got.blocks, expected_blocks, num_blocks));
            EXPECT_TRUE(ScoresAreTheLogitsBits(
                got.scores, got.out, logits, k, [](int64_t) { return int64_t{0}; },
                path == IndexerPath::kFused ? ScoreBits::kFusedKeys : ScoreBits::kExact));
          }
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------- graphs

TEST(IndexerOutputsCuda, GraphReplayGivesTheDirectCallsBits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config = cuda_decode_config(rng, 2, false, 20000);
  config.batch = 5;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged device(p);
  const int64_t width = p.block_table.size(1) * config.page_size;
  const int k = 512;
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const int num_blocks = 2048;
    const DeviceBuffer workspace = path == IndexerPath::kFused
                                       ? fused_source_workspace(k, num_blocks, 8, 4, width, 0)
                                       : source_workspace(k, num_blocks, 8, 4, width);
    Outputs direct =
        decode_with_outputs(device, p.rows(), k, false, workspace, path, true, num_blocks, 8);
    DeviceOutputs d(p.rows(), k, true, num_blocks);
    CapturedGraph graph;
    FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
      return indexer_decode(d.device_out.view, device.q.view(), device.cache.cache,
                            device.weights.view, device.context_lens.view, device.block_table.view,
                            k, TopKOptions{}, d.options(path, 8),
                            with_workspace(workspace, stream));
    }));
    ASSERT_EQ(graph.replay(3), cudaSuccess);
    Outputs replayed = d.fetch();
    EXPECT_TRUE(SameBits(replayed.out, direct.out));
    EXPECT_TRUE(SameBits(replayed.scores, direct.scores));
    EXPECT_TRUE(SameBits(replayed.blocks, direct.blocks));
  }
}

// ----------------------------------------------------------------------------- refusals

TEST(IndexerOutputsCuda, FusedPathRefusesABlockSizeItCannotPublishNamingIt) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 256, 32, 128);
  HostTensor out(DType::kI32, {8, 16});
  HostTensor blocks(DType::kI32, {8, 4});
  IndexerOptions o;
  o.path = IndexerPath::kFused;
  o.candidate_source = CandidateOutput{labelled_cuda(blocks.view()), 12};
  const Status status =
      indexer_prefill(labelled_cuda(out.view()), labelled_cuda(p.q.view()),
                      labelled_cuda(p.keys.view()), labelled_cuda(p.weights.view()),
                      labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()), 16, TopKOptions{}, o);
  EXPECT_TRUE(
      IsRejected(status, StatusCode::kUnsupported,
                 {"fused", "indexer_options.candidate_source.block_size=12", "multiple of 8"}));
}

TEST(IndexerOutputsCuda, RejectsAWorkspaceTooSmallForTheBlockScores) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 4096, 32, 128);
  const DevicePrefill device(p);
  // Room for one row of logits but not for its block scores too.
  const DeviceBuffer workspace = indexer_workspace(16, 1, 4096);
  DeviceOutputs d(8, 16, false, 64);
  const Status status =
      indexer_prefill(d.device_out.view, device.q.view(), device.keys.view(), device.weights.view,
                      device.ks.view, device.ke.view, 16, TopKOptions{},
                      d.options(IndexerPath::kDense, 8), with_workspace(workspace));
  EXPECT_TRUE(IsRejected(status, StatusCode::kWorkspaceTooSmall, {"RunOptions.workspace"}));
}

}  // namespace
}  // namespace fitest
