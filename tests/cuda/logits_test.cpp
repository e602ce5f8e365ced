// SPDX-License-Identifier: Apache-2.0
// mqa_logits / paged_mqa_logits on CUDA tensors against the reference oracle (small shapes,
// every entry within the derived tolerance, which adds the FP8 tensor cores' accumulation error
// to fp32 rounding; -inf masks exact, untouched columns untouched)
// and against the CPU backend (larger shapes, DeepGEMM's diff metric); bit-identical repeats;
// graph capture; TMA-specific argument errors. The tests that run kernels skip without a GPU; the
// argument-error tests run everywhere.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "logits_cases.h"

namespace fitest {
namespace {

constexpr int kRepeats = 20;

TEST(MqaLogitsCuda, MatchesReferenceWithinDerivedTolerance) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Shape {
    int64_t rows, keys;
  };
  for (int heads : {32, 64}) {
    for (const Shape shape : {Shape{1, 1}, Shape{5, 63}, Shape{37, 700}, Shape{133, 1500}}) {
      for (bool clean : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "H=" << heads << " rows=" << shape.rows
                                          << " keys=" << shape.keys << " clean=" << clean);
        PrefillRun run = prefill_run(rng, {KFormat::kFP8, heads, 128}, shape.rows, shape.keys);
        const DevicePrefill device(run.problem);
        const int64_t stride = shape.keys + rng.uniform_int(0, 40);
        HostTensor logits = run_on_gpu(device, shape.rows, shape.keys, stride, clean);
        EXPECT_TRUE(LogitsMatch(logits, run.starts, run.ends, run.score, 128, heads, clean,
                                /*tensor_cores=*/true));
      }
    }
  }
}

// Causal-suffix rows (ks = 0, ke = keys - rows + t + 1), two-request chunks and a chunk of 13
// requests (each row group sees one request's keys, so most work items see nothing; one request
// sees no keys at all), larger than the reference can score quickly: compared with the CPU
// backend by DeepGEMM's metric.
TEST(MqaLogitsCuda, MatchesTheCpuBackendOnLargerChunks) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    for (int requests : {1, 2, 13}) {
      const int64_t rows = 517;
      const int64_t keys = requests == 13 ? 24000 : 6000;
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " requests " << requests);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
      std::vector<int64_t> starts, ends;
      for (int64_t t = 0; t < rows; ++t) {
        int64_t start = 0;
        int64_t end = keys - rows + t + 1;
        if (requests == 2 && t >= rows / 2) {
          start = 2500;  // the second request's keys start mid-tile
          end = start + 1000 + t;
        } else if (requests == 2) {
          end = 1000 + t;
        } else if (requests == 13) {
          const int64_t request = t * requests / rows;
          start = request * 1841;  // mid-tile
          end = request == 4 ? start : start + 1000 + t % 40 * 20;
        }
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
      const double diff = calc_diff(got, expected, starts, ends);
      EXPECT_LT(diff, 5e-6);
      for (int64_t t = 0; t < rows; ++t) {
        for (int64_t s = 0; s < keys; ++s) {
          const bool visible = s >= starts[t] && s < ends[t];
          const float value = got.at<float>({t, s});
          if (visible != std::isfinite(value) || (!visible && value != -kInf)) {
            FAIL() << "row " << t << " key " << s << " is " << value << ", visible " << visible;
          }
        }
      }
    }
  }
}

TEST(MqaLogitsCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 301, 4100, heads, 128);
    const DevicePrefill device(p);
    HostTensor logits = poisoned_logits(301, 4100);
    DeviceTensor out = to_device(logits);
    std::vector<uint32_t> first;
    for (int run = 0; run < kRepeats; ++run) {
      ASSERT_EQ(cudaMemset(out.buffer.get(), 0x7f, logits.byte_size()), cudaSuccess);
      FI_ASSERT_OK(device.run(out, true));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      to_host(logits, out);
      if (run == 0) {
        first = bits_of(logits);
      } else {
        ASSERT_EQ(bits_of(logits), first) << "H=" << heads << " run " << run << " differs";
      }
    }
  }
}

TEST(MqaLogitsCuda, GraphReplayGivesTheSameBits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 64, 3000, 64, 128);
  const DevicePrefill device(p);
  HostTensor direct = run_on_gpu(device, 64, 3000, 3000, true);

  HostTensor replayed = poisoned_logits(64, 3000);
  DeviceTensor out = to_device(replayed);
  CapturedGraph graph;
  FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) { return device.run(out, true, stream); }));
  ASSERT_EQ(graph.replay(3), cudaSuccess);
  to_host(replayed, out);
  EXPECT_EQ(bits_of(replayed), bits_of(direct));
}

// ----------------------------------------------------------------------------- paged

TEST(PagedMqaLogitsCuda, MatchesReferenceWithinDerivedTolerance) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int next_n = 1; next_n <= 4; ++next_n) {
      for (bool two_dim : {false, true}) {
        DecodeConfig config;
        config.heads = heads;
        config.next_n = next_n;
        config.two_dim_lens = two_dim;
        config.batch = 1 + index % 5;
        config.page_size = std::vector<int>{32, 64, 128}[index % 3];
        config.max_len = 200 + 150 * (index % 4);
        config.stride_pad_bytes = 16 * rng.uniform_int(0, 8);
        const bool clean = index % 2 == 0;
        ++index;
        SCOPED_TRACE(describe(config) + (clean ? " clean" : " not clean"));
        PagedRun run = paged_run(rng, config);
        DecodeProblem& p = run.problem;
        const DevicePaged device(p);
        HostTensor logits =
            run_on_gpu(device, p.rows(), p.width, p.width + rng.uniform_int(0, 30), clean);
        EXPECT_TRUE(LogitsMatch(logits, run.starts, p.ends, run.score, 128, heads, clean,
                                /*tensor_cores=*/true));
      }
    }
  }
}

// The GPU's paged logits of p (clean) against the CPU backend's: DeepGEMM's diff over the visible
// entries, finite there, -inf past each row's end.
void ExpectPagedMatchesTheCpuBackend(DecodeProblem p) {
  HostTensor expected = poisoned_logits(p.rows(), p.width);
  FI_ASSERT_OK(paged_mqa_logits(expected.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                p.context_lens.view(), p.block_table.view(), LogitsOptions{true}));
  const DevicePaged device(p);
  HostTensor got = run_on_gpu(device, p.rows(), p.width, p.width, true);
  const std::vector<int64_t> starts(static_cast<size_t>(p.rows()), 0);
  EXPECT_LT(calc_diff(got, expected, starts, p.ends), 5e-6);
  for (int64_t r = 0; r < p.rows(); ++r) {
    for (int64_t s = 0; s < p.width; ++s) {
      const float value = got.at<float>({r, s});
      const bool visible = s < p.ends[r];
      ASSERT_TRUE(visible ? std::isfinite(value) : value == -kInf)
          << "row " << r << " column " << s << " is " << value;
    }
  }
}

// One request with a long context: its keys are split across the CTAs.
TEST(PagedMqaLogitsCuda, LongSingleRequestMatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int heads : {32, 64}) {
    DecodeConfig config;
    config.heads = heads;
    config.batch = 2;
    config.next_n = 2;
    config.two_dim_lens = true;
    config.max_len = 40000;
    SCOPED_TRACE(describe(config));
    ExpectPagedMatchesTheCpuBackend(make_decode_problem(rng, config, {40000, 39000, 123, 7}));
  }
}

// More requests than CTAs and than a warp's batch of 32, ragged, with a run of empty requests and
// a few long ones: each CTA's equal share of all key tiles starts and ends inside requests and
// spans several (decode_share.cuh).
TEST(PagedMqaLogitsCuda, ManyRaggedRequestsMatchTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Case {
    int heads;
    int next_n;
    bool two_dim;
  };
  for (const Case c : {Case{64, 1, false}, Case{64, 2, true}, Case{32, 3, true}}) {
    DecodeConfig config;
    config.heads = c.heads;
    config.batch = 300;
    config.next_n = c.next_n;
    config.two_dim_lens = c.two_dim;
    const int per_request = c.two_dim ? c.next_n : 1;
    std::vector<int32_t> lens(static_cast<size_t>(config.batch * per_request));
    for (size_t i = 0; i < lens.size(); ++i) {
      const auto request = static_cast<int>(i) / per_request;
      lens[i] = request >= 40 && request < 80 ? 0
                : request % 97 == 5           ? static_cast<int32_t>(rng.uniform_int(15000, 20000))
                                              : static_cast<int32_t>(rng.uniform_int(0, 3000));
    }
    config.max_len = 20000;
    SCOPED_TRACE(describe(config));
    ExpectPagedMatchesTheCpuBackend(make_decode_problem(rng, config, lens));
  }
}

// Each decode Q tile whose head sums cross lanes: one row (next_n 1: N = 64 at H = 64, N = 32 at
// H = 32), two rows (next_n 2) and three (H = 64, next_n 3).
TEST(PagedMqaLogitsCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const std::pair<int, int> layouts[] = {{64, 3}, {64, 2}, {32, 2}, {32, 1}, {64, 1}};
  for (const auto& [heads, next_n] : layouts) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads << " next_n=" << next_n);
    DecodeConfig config;
    config.heads = heads;
    config.batch = 9;
    config.next_n = next_n;
    config.max_len = 3000;
    DecodeProblem p = make_decode_problem(rng, config);
    const DevicePaged device(p);
    std::vector<uint32_t> first;
    for (int run = 0; run < kRepeats; ++run) {
      HostTensor logits = run_on_gpu(device, p.rows(), p.width, p.width, true);
      if (run == 0) {
        first = bits_of(logits);
      } else {
        ASSERT_EQ(bits_of(logits), first) << "run " << run << " differs";
      }
    }
  }
}

// ----------------------------------------------------------------------------- bad input

// The argument errors need no GPU (labelled_cuda, support/cuda.h): these tests run in CI.

TEST(MqaLogitsCuda, RejectsWhatTmaCannotRead) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 256, 32, 128);
  HostTensor logits = poisoned_logits(8, 256);
  const TensorView out = labelled_cuda(logits.view());
  const QuantizedTensor q = labelled_cuda(p.q.view());
  const QuantizedTensor keys = labelled_cuda(p.keys.view());
  const TensorView weights = labelled_cuda(p.weights.view());
  const TensorView ks = labelled_cuda(p.ks.view());
  const TensorView ke = labelled_cuda(p.ke.view());
  const LogitsOptions clean{true};

  QuantizedTensor shifted_q = q;
  shifted_q.values.data = static_cast<uint8_t*>(shifted_q.values.data) + 1;
  EXPECT_TRUE(IsRejected(mqa_logits(out, shifted_q, keys, weights, ks, ke, clean),
                         StatusCode::kInvalidArgument, {"mqa_logits", "q"}));

  QuantizedTensor strided_scales = keys;
  strided_scales.scales.shape[0] = 128;
  strided_scales.scales.stride[0] = 2;
  strided_scales.values.shape[0] = 128;
  HostTensor narrow = poisoned_logits(8, 128);
  HostTensor ks_host = i32_tensor(std::vector<int32_t>(8, 0));
  HostTensor ke_host = i32_tensor(std::vector<int32_t>(8, 100));
  EXPECT_TRUE(
      IsRejected(mqa_logits(labelled_cuda(narrow.view()), q, strided_scales, weights,
                            labelled_cuda(ks_host.view()), labelled_cuda(ke_host.view()), clean),
                 StatusCode::kInvalidArgument, {"keys.scales"}));

  TensorView odd_weights = weights;
  odd_weights.shape[0] = 4;
  odd_weights.stride[0] = 33;
  QuantizedTensor four_rows = q;
  four_rows.values.shape[0] = 4;
  HostTensor four = poisoned_logits(4, 256);
  HostTensor ks4 = i32_tensor({0, 0, 0, 0});
  HostTensor ke4 = i32_tensor({1, 2, 3, 4});
  EXPECT_TRUE(IsRejected(mqa_logits(labelled_cuda(four.view()), four_rows, keys, odd_weights,
                                    labelled_cuda(ks4.view()), labelled_cuda(ke4.view()), clean),
                         StatusCode::kInvalidArgument, {"weights"}));
}

TEST(MqaLogitsCuda, ReportsHeadDimsOtherThan128AsUnsupported) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  for (const OperandCase c :
       {OperandCase{KFormat::kMXFP4, 32, 64}, OperandCase{KFormat::kFP8, 32, 64}}) {
    SCOPED_TRACE(describe(c));
    PrefillProblem p = make_prefill_problem(rng, c.format, 4, 100, c.heads, c.head_dim);
    HostTensor logits = poisoned_logits(4, 100);
    const Status status = mqa_logits(labelled_cuda(logits.view()), labelled_cuda(p.q.view()),
                                     labelled_cuda(p.keys.view()), labelled_cuda(p.weights.view()),
                                     labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()));
    EXPECT_EQ(status.code(), StatusCode::kUnsupported) << status_text(status);
  }
}

TEST(PagedMqaLogitsCuda, RejectsPageSizesAndStridesTmaCannotRead) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  for (int page_size : {16, 64}) {
    DecodeConfig config;
    config.page_size = page_size;
    config.stride_pad_bytes = page_size == 64 ? 4 : 0;  // 16 fails on size, 64 on the stride
    DecodeProblem p = make_decode_problem(rng, config);
    HostTensor logits = poisoned_logits(p.rows(), p.width);
    PagedKCache cache = p.cache.cache();
    cache.device = Device::kCUDA;
    EXPECT_TRUE(IsRejected(
        paged_mqa_logits(labelled_cuda(logits.view()), labelled_cuda(p.q.view()), cache,
                         labelled_cuda(p.weights.view()), labelled_cuda(p.context_lens.view()),
                         labelled_cuda(p.block_table.view())),
        StatusCode::kInvalidArgument, {page_size == 16 ? "page_size" : "page_stride_bytes"}));
  }
}

TEST(PagedMqaLogitsCuda, RejectsNextNAboveFourAndUnmergeableQueryStrides) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  for (int next_n : {5, 2}) {
    DecodeConfig config;
    config.next_n = next_n;
    config.batch = 3;
    DecodeProblem p = make_decode_problem(rng, config);
    HostTensor logits = poisoned_logits(p.rows(), p.width);
    QuantizedTensor q = labelled_cuda(p.q.view());
    if (next_n == 2) {
      // Batch stride one next_n row wider than next_n rows: the Q tile map cannot merge them.
      q.values.shape[0] = 2;
      q.values.stride[0] = q.values.stride[1] * 3;
    }
    TensorView weights = labelled_cuda(p.weights.view());
    TensorView lens = labelled_cuda(p.context_lens.view());
    TensorView table = labelled_cuda(p.block_table.view());
    TensorView out = labelled_cuda(logits.view());
    if (next_n == 2) {
      weights.shape[0] = 4;
      lens.shape[0] = 2;
      table.shape[0] = 2;
      out.shape[0] = 4;
    }
    PagedKCache cache = p.cache.cache();
    cache.device = Device::kCUDA;
    EXPECT_TRUE(IsRejected(paged_mqa_logits(out, q, cache, weights, lens, table),
                           StatusCode::kInvalidArgument, {next_n == 5 ? "next_n" : "q.stride[0]"}))
        << "next_n " << next_n;
  }
}

}  // namespace
}  // namespace fitest
