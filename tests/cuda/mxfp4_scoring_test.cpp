// SPDX-License-Identifier: Apache-2.0
// MXFP4 operands on CUDA: mqa_logits / paged_mqa_logits against the reference (small shapes, the
// derived tolerance with the FP8 tensor cores' accumulation term, -inf masks exact) and against
// the CPU backend (larger shapes, DeepGEMM's diff metric); vectors whose block scales span more
// binades than e4m3 holds (the NaN-marked exact fix-up), all-zero blocks under huge scales,
// saturating values, page sizes 32 / 64 / 128 and V4's wide page (FP8-sized pages, only the first
// page_size x 68 bytes used); bit-identical repeats; argument errors. The tests that run kernels
// skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "logits_cases.h"
#include "mxfp4_cases.h"

namespace fitest {
namespace {

constexpr int kHeadDim = kMxfp4HeadDim;
constexpr int kBlocks = kMxfp4Blocks;
constexpr int kRepeats = 20;

// Visible entries finite, the others -inf (clean logits).
::testing::AssertionResult FiniteInsideMinusInfOutside(const HostTensor& got,
                                                       const std::vector<int64_t>& starts,
                                                       const std::vector<int64_t>& ends) {
  for (int64_t t = 0; t < got.size(0); ++t) {
    for (int64_t s = 0; s < got.size(1); ++s) {
      const float value = got.at<float>({t, s});
      const bool visible = s >= starts[t] && s < ends[t];
      if (visible ? !std::isfinite(value) : value != -kInf) {
        return ::testing::AssertionFailure() << "row " << t << " column " << s << " is " << value;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The GPU's paged logits of p (clean) against the CPU backend's.
void ExpectPagedMatchesTheCpuBackend(DecodeProblem& p) {
  HostTensor expected = poisoned_logits(p.rows(), p.width);
  FI_ASSERT_OK(paged_mqa_logits(expected.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                p.context_lens.view(), p.block_table.view(), LogitsOptions{true}));
  const DevicePaged device(p);
  HostTensor got = run_on_gpu(device, p.rows(), p.width, p.width, true);
  const std::vector<int64_t> starts(static_cast<size_t>(p.rows()), 0);
  EXPECT_LT(calc_diff(got, expected, starts, p.ends), 5e-6);
  EXPECT_TRUE(FiniteInsideMinusInfOutside(got, starts, p.ends));
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
        PrefillRun run =
            prefill_run(rng, {KFormat::kMXFP4, heads, kHeadDim}, shape.rows, shape.keys);
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

// next_n 1..4, page sizes 32 / 64 / 128, 1-D and 2-D lengths, V4's wide page every fourth case.
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
        // V4's page: FP8-sized (132 bytes per key), the first 68 of each key's share used.
        config.stride_pad_bytes =
            index % 4 == 0 ? config.page_size * (132 - 68) : 16 * rng.uniform_int(0, 8);
        const bool clean = index % 3 != 0;
        ++index;
        SCOPED_TRACE(describe(config) + (spread ? " spread" : ""));
        PagedRun run = paged_run(rng, config);
        DecodeProblem& p = run.problem;
        if (spread) spread_decode(p, heads);
        const DevicePaged device(p);
        HostTensor logits =
            run_on_gpu(device, p.rows(), p.width, p.width + rng.uniform_int(0, 30), clean);
        EXPECT_TRUE(LogitsMatch(logits, run.starts, p.ends, run.score, kHeadDim, heads, clean,
                                /*tensor_cores=*/true));
      }
    }
  }
}

// Causal suffixes of one, two and 13 requests in one chunk: against the CPU backend.
TEST(Mxfp4ScoringCuda, PrefillChunksMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (int requests : {1, 2, 13}) {
      const int64_t rows = 517;
      const int64_t keys = requests == 13 ? 24000 : 6000;
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " requests " << requests);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
      spread_scales(p.keys, keys, 11, 503);
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
      EXPECT_TRUE(FiniteInsideMinusInfOutside(got, starts, ends));
    }
  }
}

// With a workspace the call converts its operands there once and runs the FP8 kernel: the
// converting kernel's bits, clean or not, with out-of-span vectors in both operands (the fix-up),
// through a poisoned workspace, twice; a workspace too small is refused, naming its size query.
TEST(Mxfp4ScoringCuda, PrefillWithAWorkspaceHasTheConvertingKernelsBits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (bool clean : {true, false}) {
      const int64_t rows = rng.uniform_int(1, 300);
      const int64_t keys = rng.uniform_int(1, 9000);
      SCOPED_TRACE(::testing::Message()
                   << "H=" << heads << " rows=" << rows << " keys=" << keys << " clean=" << clean);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
      spread_scales(p.keys, keys, 1, 7);
      spread_scales(p.q, rows * heads, 3, 11);
      const DevicePrefill device(p);
      const HostTensor expected = run_on_gpu(device, rows, keys, keys + 3, clean);
      const size_t bytes = mqa_logits_cuda_workspace_size(rows, heads, keys);
      const DeviceBuffer workspace = poisoned_device_buffer(bytes);
      auto run = [&](const DeviceBuffer& buffer) {
        HostTensor got = poisoned_logits(rows, keys, keys + 3);
        DeviceTensor out = to_device(got);
        const Status status = mqa_logits(out.view, device.q.view(), device.keys.view(),
                                         device.weights.view, device.ks.view, device.ke.view,
                                         LogitsOptions{clean}, with_workspace(buffer));
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(got, out);
        return std::make_pair(status, std::move(got));
      };
      for (int repeat = 0; repeat < 2; ++repeat) {
        auto [status, got] = run(workspace);
        FI_ASSERT_OK(status);
        EXPECT_EQ(std::memcmp(got.bytes(), expected.bytes(), expected.byte_size()), 0);
      }
      const DeviceBuffer small = poisoned_device_buffer(bytes - 256);
      EXPECT_TRUE(IsRejected(run(small).first, StatusCode::kWorkspaceTooSmall,
                             {"mqa_logits_cuda_workspace_size"}));
    }
  }
}

// Decode batch 1 with a long context (split across the CTAs) and batch 256 ragged, with
// out-of-span vectors in both.
TEST(Mxfp4ScoringCuda, DecodeBatchesMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int batch : {1, 256}) {
      DecodeConfig config;
      config.format = KFormat::kMXFP4;
      config.heads = heads;
      config.batch = batch;
      config.next_n = batch == 1 ? 1 : 1 + index % 4;
      config.page_size = std::vector<int>{64, 32, 128, 64}[index % 4];
      config.max_len = batch == 1 ? 30000 : 1500;
      config.stride_pad_bytes = index % 2 == 0 ? config.page_size * (132 - 68) : 0;
      ++index;
      SCOPED_TRACE(describe(config));
      DecodeProblem p = make_decode_problem(
          rng, config, batch == 1 ? std::vector<int32_t>{30000} : std::vector<int32_t>{});
      for (Operand& keys : p.request_keys) spread_scales(keys, keys.values.size(0), 3, 997);
      rewrite_cache(p);
      ExpectPagedMatchesTheCpuBackend(p);
    }
  }
}

// Every vector of q and K out of span: every logit through the fix-up.
TEST(Mxfp4ScoringCuda, AllVectorsOutOfSpanMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads);
    PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, 23, 900, heads, kHeadDim);
    constexpr ScalePattern kWide{{0, -16, 3, -19}, false, false};
    for (int64_t i = 0; i < p.num_keys; ++i) {
      apply_pattern(p.keys.values.bytes(), p.keys.scales.bytes(), i, kWide);
    }
    for (int64_t i = 0; i < 23 * heads; ++i) {
      apply_pattern(p.q.values.bytes(), p.q.scales.bytes(), i, kWide);
    }
    std::vector<int64_t> starts, ends;
    for (int64_t t = 0; t < 23; ++t) {
      starts.push_back(p.ks.data<int32_t>()[t]);
      ends.push_back(p.ke.data<int32_t>()[t]);
    }
    HostTensor expected = poisoned_logits(23, 900);
    FI_ASSERT_OK(mqa_logits(expected.view(), p.q.view(), p.keys.view(), p.weights.view(),
                            p.ks.view(), p.ke.view(), LogitsOptions{true}));
    const DevicePrefill device(p);
    HostTensor got = run_on_gpu(device, 23, 900, 900, true);
    EXPECT_LT(calc_diff(got, expected, starts, ends), 5e-6);
    EXPECT_TRUE(FiniteInsideMinusInfOutside(got, starts, ends));
  }
}

TEST(Mxfp4ScoringCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillProblem prefill = make_prefill_problem(rng, KFormat::kMXFP4, 301, 4100, 64, kHeadDim);
  spread_scales(prefill.keys, prefill.num_keys, 2, 97);
  spread_scales(prefill.q, 301 * 64, 5, 1001);
  const DevicePrefill prefill_device(prefill);
  DecodeConfig config;
  config.format = KFormat::kMXFP4;
  config.heads = 32;
  config.batch = 9;
  config.next_n = 3;
  config.max_len = 3000;
  DecodeProblem decode = make_decode_problem(rng, config);
  spread_decode(decode, config.heads);
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

// ----------------------------------------------------------------------------- bad input

TEST(Mxfp4ScoringCuda, RejectsQueryScalesWithGappedHeads) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, 4, 256, 32, kHeadDim);
  // The same shape read with every other head's scales: the heads are 8 bytes apart.
  HostTensor wide_scales(DType::kUE8M0, {4, 32, 2 * kBlocks});
  QuantizedTensor q = labelled_cuda(p.q.view());
  q.scales = labelled_cuda(wide_scales.view());
  q.scales.shape[2] = kBlocks;
  HostTensor logits = poisoned_logits(4, 256);
  EXPECT_TRUE(IsRejected(mqa_logits(labelled_cuda(logits.view()), q, labelled_cuda(p.keys.view()),
                                    labelled_cuda(p.weights.view()), labelled_cuda(p.ks.view()),
                                    labelled_cuda(p.ke.view())),
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

TEST(Mxfp4ScoringCuda, RejectsHeadDim64) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, 4, 100, 32, 64);
  HostTensor logits = poisoned_logits(4, 100);
  EXPECT_TRUE(IsRejected(mqa_logits(labelled_cuda(logits.view()), labelled_cuda(p.q.view()),
                                    labelled_cuda(p.keys.view()), labelled_cuda(p.weights.view()),
                                    labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view())),
                         StatusCode::kUnsupported, {"mqa_logits", "head_dim"}));
}

TEST(Mxfp4ScoringCuda, RejectsPageStrideTmaCannotRead) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.format = KFormat::kMXFP4;
  config.stride_pad_bytes = 4;  // a page stride of 64 x 68 + 4 bytes: not a multiple of 16
  DecodeProblem p = make_decode_problem(rng, config);
  HostTensor logits = poisoned_logits(p.rows(), p.width);
  PagedKCache cache = p.cache.cache();
  cache.device = Device::kCUDA;
  EXPECT_TRUE(IsRejected(
      paged_mqa_logits(labelled_cuda(logits.view()), labelled_cuda(p.q.view()), cache,
                       labelled_cuda(p.weights.view()), labelled_cuda(p.context_lens.view()),
                       labelled_cuda(p.block_table.view())),
      StatusCode::kInvalidArgument, {"paged_mqa_logits", "page_stride_bytes"}));
}

}  // namespace
}  // namespace fitest
