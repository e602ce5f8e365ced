// SPDX-License-Identifier: Apache-2.0
// MXFP4 operands on CUDA: mqa_logits / paged_mqa_logits against the reference (small shapes,
// the derived tolerance with the FP8 tensor cores' accumulation term, -inf masks exact) and
// against the CPU backend (larger shapes, DeepGEMM's diff metric); vectors whose block scales
// span more binades than e4m3 holds (the exact fallback), all-zero blocks under huge scales,
// the V4 page (FP8-sized pages, only the first page_size x 68 bytes used); bit-identical repeats;
// indexer_prefill / indexer_decode on both paths equal to the dense pair bit for bit; argument
// errors. The tests that run kernels skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "indexer_cases.h"
#include "logits_cases.h"

namespace fitest {
namespace {

constexpr int kHeadDim = 128;
constexpr int kBlocks = kHeadDim / kMxfp4BlockSize;

// Block scale bytes relative to 127 that stress the conversion: spans of 8 (all normal), 14 (the
// widest exact one: the smallest values become e4m3 subnormals), 15 and 20 (flagged: the exact
// fallback), and a block of zeros under the largest byte (ignored when the span is taken).
struct ScalePattern {
  int offsets[kBlocks];
  bool zero_block;  // block 2's values cleared, its byte 254
};
constexpr ScalePattern kPatterns[] = {
    {{3, -3, -5, 1}, false},  {{0, -14, 0, -2}, false}, {{0, -15, -1, 0}, false},
    {{2, -18, 2, -20}, false}, {{-2, 0, 0, -1}, true},
};

// Rewrites vector i of an MXFP4 operand (values [n, 64], scales [n, 4] viewed flat) with the
// pattern `pattern`.
void apply_pattern(uint8_t* values, uint8_t* scales, int64_t i, const ScalePattern& pattern) {
  for (int b = 0; b < kBlocks; ++b) {
    scales[i * kBlocks + b] = static_cast<uint8_t>(127 + pattern.offsets[b]);
  }
  if (pattern.zero_block) {
    std::memset(values + i * kHeadDim / 2 + 2 * kMxfp4BlockSize / 2, 0, kMxfp4BlockSize / 2);
    scales[i * kBlocks + 2] = 254;
  }
}

// Every `every`-th vector (from `first`) of an operand gets the next pattern.
void spread_scales(Operand& operand, int64_t vectors, int64_t first, int64_t every) {
  int next = 0;
  for (int64_t i = first; i < vectors; i += every) {
    apply_pattern(operand.values.bytes(), operand.scales.bytes(), i,
                  kPatterns[next++ % std::size(kPatterns)]);
  }
}

// Rewrites a decode problem's cache from its request keys (after they were changed).
void rewrite_cache(DecodeProblem& p) {
  const int page_size = p.config.page_size;
  for (int b = 0; b < p.config.batch; ++b) {
    for (int64_t s = 0; s < p.stored[b]; ++s) {
      const int64_t page = p.block_table.at<int32_t>({b, s / page_size});
      p.cache.write_slot(page * page_size + s % page_size, p.request_keys[b], s);
    }
  }
}

TEST(Mxfp4ScoringCuda, PrefillMatchesReferenceWithinDerivedTolerance) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Shape {
    int64_t rows, keys;
  };
  for (int heads : {32, 64}) {
    for (const Shape shape : {Shape{1, 1}, Shape{5, 63}, Shape{37, 700}, Shape{133, 1500}}) {
      for (bool spread : {false, true}) {
        const bool clean = shape.rows % 2 == 1;
        SCOPED_TRACE(::testing::Message() << "H=" << heads << " rows=" << shape.rows
                                          << " keys=" << shape.keys << " spread=" << spread);
        PrefillRun run = prefill_run(rng, {KFormat::kMXFP4, heads, kHeadDim}, shape.rows,
                                     shape.keys);
        PrefillProblem& p = run.problem;
        if (spread) {
          spread_scales(p.keys, p.num_keys, 1, 7);
          spread_scales(p.q, p.rows * heads, 3, 11);
        }
        const DevicePrefill device(p);
        const int64_t stride = shape.keys + rng.uniform_int(0, 40);
        HostTensor logits = run_on_gpu(device, shape.rows, shape.keys, stride, clean);
        EXPECT_TRUE(LogitsMatch(logits, run.starts, run.ends, run.score, kHeadDim, heads, clean,
                                /*tensor_cores=*/true));
      }
    }
  }
}

TEST(Mxfp4ScoringCuda, PagedMatchesReferenceWithinDerivedTolerance) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int next_n = 1; next_n <= 4; ++next_n) {
      for (bool spread : {false, true}) {
        DecodeConfig config;
        config.format = KFormat::kMXFP4;
        config.heads = heads;
        config.next_n = next_n;
        config.two_dim_lens = index % 2 == 1;
        config.batch = 1 + index % 5;
        config.page_size = std::vector<int>{32, 64, 128}[index % 3];
        config.max_len = 200 + 150 * (index % 4);
        // Every fourth case the V4 page: FP8-sized (132 bytes per key), 68 of them used.
        config.stride_pad_bytes =
            index % 4 == 0 ? config.page_size * (132 - 68) : 16 * rng.uniform_int(0, 8);
        const bool clean = index % 3 != 0;
        ++index;
        SCOPED_TRACE(describe(config) + (spread ? " spread" : ""));
        PagedRun run = paged_run(rng, config);
        DecodeProblem& p = run.problem;
        if (spread) {
          for (Operand& keys : p.request_keys) spread_scales(keys, keys.values.size(0), 0, 5);
          rewrite_cache(p);
          spread_scales(p.q, p.rows() * heads, 1, 9);
        }
        const DevicePaged device(p);
        HostTensor logits =
            run_on_gpu(device, p.rows(), p.width, p.width + rng.uniform_int(0, 30), clean);
        EXPECT_TRUE(LogitsMatch(logits, run.starts, p.ends, run.score, kHeadDim, heads, clean,
                                /*tensor_cores=*/true));
      }
    }
  }
}

// Causal suffixes of two requests and a chunk of 13 requests, too large for the reference:
// against the CPU backend.
TEST(Mxfp4ScoringCuda, PrefillChunksMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (int requests : {1, 2, 13}) {
      const int64_t rows = 517;
      const int64_t keys = requests == 13 ? 24000 : 6000;
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " requests " << requests);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
      std::vector<int64_t> starts, ends;
      for (int64_t t = 0; t < rows; ++t) {
        const int64_t request = t * requests / rows;
        const int64_t start = request * (keys / requests) + (requests > 1 ? 37 : 0);
        const int64_t end = std::min<int64_t>(keys, start + 1000 + t * 7);
        p.ks.data<int32_t>()[t] = static_cast<int32_t>(start);
        p.ke.data<int32_t>()[t] = static_cast<int32_t>(end);
        starts.push_back(start);
        ends.push_back(end);
      }
      HostTensor expected = poisoned_logits(rows, keys);
      FI_ASSERT_OK(mqa_logits(expected.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              p.ks.view(), p.ke.view(), LogitsOptions{true}));
      const DevicePrefill device(p);
      HostTensor got = run_on_gpu(device, rows, keys, keys, true);
      EXPECT_LT(calc_diff(got, expected, starts, ends), 5e-6);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t s = 0; s < keys; ++s) {
          const bool visible = s >= starts[t] && s < ends[t];
          const float value = got.at<float>({t, s});
          ASSERT_TRUE(visible ? std::isfinite(value) : value == -kInf)
              << "row " << t << " key " << s << " is " << value;
        }
      }
    }
  }
}

// Decode batch 1 with a long context (split across the CTAs) and batch 256 ragged.
TEST(Mxfp4ScoringCuda, DecodeBatchesMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (int batch : {1, 256}) {
      DecodeConfig config;
      config.format = KFormat::kMXFP4;
      config.heads = heads;
      config.batch = batch;
      config.next_n = batch == 1 ? 1 : 2;
      config.max_len = batch == 1 ? 60000 : 3000;
      SCOPED_TRACE(describe(config));
      ExpectPagedMatchesTheCpuBackend(
          make_decode_problem(rng, config, batch == 1 ? std::vector<int32_t>{60000} : std::vector<int32_t>{}));
    }
  }
}

TEST(Mxfp4ScoringCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillProblem prefill = make_prefill_problem(rng, KFormat::kMXFP4, 301, 4100, 64, kHeadDim);
  spread_scales(prefill.keys, prefill.num_keys, 2, 97);
  const DevicePrefill prefill_device(prefill);
  DecodeConfig config;
  config.format = KFormat::kMXFP4;
  config.heads = 32;
  config.batch = 9;
  config.next_n = 3;
  config.max_len = 3000;
  DecodeProblem decode = make_decode_problem(rng, config);
  const DevicePaged decode_device(decode);
  std::vector<uint32_t> first_prefill;
  std::vector<uint32_t> first_decode;
  for (int run = 0; run < kRepeats; ++run) {
    const std::vector<uint32_t> prefill_bits =
        bits_of(run_on_gpu(prefill_device, 301, 4100, 4100, true));
    const std::vector<uint32_t> decode_bits =
        bits_of(run_on_gpu(decode_device, decode.rows(), decode.width, decode.width, true));
    if (run == 0) {
      first_prefill = prefill_bits;
      first_decode = decode_bits;
    } else {
      ASSERT_EQ(prefill_bits, first_prefill) << "prefill run " << run << " differs";
      ASSERT_EQ(decode_bits, first_decode) << "decode run " << run << " differs";
    }
  }
}

// ----------------------------------------------------------------------------- indexer

TEST(Mxfp4IndexerCuda, PrefillPathsEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int k : {64, 512, 2048}) {
      const int64_t rows = rng.uniform_int(60, 190);
      const int64_t keys = rng.uniform_int(2500, 9000);
      const bool sorted = index % 2 == 0;
      const bool ties = index % 3 == 0;
      ++index;
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " k=" << k << " rows=" << rows
                                        << " keys=" << keys << " ties=" << ties);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
      if (ties) add_ties(rng, p.keys, {KFormat::kMXFP4, heads, kHeadDim}, keys);
      spread_scales(p.keys, keys, 5, 301);
      const DevicePrefill device(p);
      const RowRanges host_ranges = RowRanges::prefill(p.ks.view(), p.ke.view());
      const HostTensor expected = cpu_topk_of_gpu_logits(device, rows, keys, host_ranges, k, sorted);
      const HostTensor dense = gpu_dense_topk(
          device, rows, keys, RowRanges::prefill(device.ks.view, device.ke.view), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      for (IndexerPath path : kPaths) {
        SCOPED_TRACE(path_name(path));
        const DeviceBuffer workspace = path_workspace(path, k, 0, keys);
        const HostTensor got = run_prefill(device, rows, k, sorted, workspace, k + 5, path);
        EXPECT_TRUE(SameTopK(got, expected, k, sorted));
        EXPECT_TRUE(SameTopK(got, dense, k, true));
      }
    }
  }
}

TEST(Mxfp4IndexerCuda, DecodePathsEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (int heads : {32, 64}) {
      DecodeConfig config;
      config.format = KFormat::kMXFP4;
      config.heads = heads;
      config.next_n = next_n;
      config.two_dim_lens = index % 2 == 0;
      config.batch = index % 3 == 0 ? 1 : 64;
      config.page_size = std::vector<int>{32, 64, 128}[index % 3];
      config.max_len = index % 3 == 0 ? 40000 : 3000;
      const int k = std::vector<int>{2048, 512, 64}[index % 3];
      const bool sorted = index % 2 == 1;
      ++index;
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      const DevicePaged device(p);
      const RowRanges host_ranges = RowRanges::decode(p.context_lens.view(), next_n);
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, p.rows(), p.width, host_ranges, k, sorted);
      const HostTensor dense = gpu_dense_topk(
          device, p.rows(), p.width, RowRanges::decode(device.context_lens.view, next_n), k,
          sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      const int64_t table_width = p.block_table.size(1) * config.page_size;
      for (IndexerPath path : kPaths) {
        SCOPED_TRACE(path_name(path));
        const DeviceBuffer workspace = path_workspace(path, k, 0, table_width);
        const HostTensor got = run_decode(device, p.rows(), k, sorted, workspace, path);
        EXPECT_TRUE(SameTopK(got, expected, k, sorted));
        EXPECT_TRUE(SameTopK(got, dense, k, true));
      }
    }
  }
}

// ----------------------------------------------------------------------------- bad input

TEST(Mxfp4ScoringCuda, RejectsScalesOneCopyCannotRead) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, 8, 256, 32, kHeadDim);
  HostTensor logits = poisoned_logits(8, 256);
  QuantizedTensor q = labelled_cuda(p.q.view());
  q.values.shape[0] = 4;
  q.scales.shape[0] = 4;
  q.scales.stride[0] *= 2;  // every other row's scales
  HostTensor four = poisoned_logits(4, 256);
  TensorView weights = labelled_cuda(p.weights.view());
  weights.shape[0] = 4;
  TensorView ks = labelled_cuda(p.ks.view());
  TensorView ke = labelled_cuda(p.ke.view());
  ks.shape[0] = 4;
  ke.shape[0] = 4;
  EXPECT_TRUE(IsRejected(mqa_logits(labelled_cuda(four.view()), q, labelled_cuda(p.keys.view()),
                                    weights, ks, ke),
                         StatusCode::kInvalidArgument, {"mqa_logits", "q.scales"}));
}

TEST(Mxfp4ScoringCuda, RejectsMixedFormats) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem mxfp4 = make_prefill_problem(rng, KFormat::kMXFP4, 4, 100, 32, kHeadDim);
  PrefillProblem fp8 = make_prefill_problem(rng, KFormat::kFP8, 4, 100, 32, kHeadDim);
  HostTensor logits = poisoned_logits(4, 100);
  const Status status =
      mqa_logits(labelled_cuda(logits.view()), labelled_cuda(mxfp4.q.view()),
                 labelled_cuda(fp8.keys.view()), labelled_cuda(mxfp4.weights.view()),
                 labelled_cuda(mxfp4.ks.view()), labelled_cuda(mxfp4.ke.view()));
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status_text(status).find("keys.values"), std::string::npos) << status_text(status);
}

}  // namespace
}  // namespace fitest
