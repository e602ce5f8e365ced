// SPDX-License-Identifier: Apache-2.0
// The CPU backend on every SIMD target Highway can run on this machine: each target's logits
// and selections are the same bits (the scoring arithmetic is defined lane by lane, see
// src/cpu/scoring/score.h), and they do not depend on the thread count.
#include <hwy/targets.h>

#include <memory>

#include "cpu/scoring/score.h"
#include "support/compare.h"

namespace fitest {
namespace {

// Restores Highway's own target choice when a test ends, however it ends.
class ForcedTarget {
 public:
  explicit ForcedTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
  ~ForcedTarget() { hwy::SetSupportedTargetsForTest(0); }
};

struct PrefillOutputs {
  std::vector<float> logits;
  std::vector<int32_t> indices;
};

PrefillOutputs run_prefill(const PrefillProblem& p, int k, int threads) {
  RunOptions options;
  options.cpu_threads = threads;
  HostTensor logits = poisoned_logits(p.rows, p.num_keys);
  HostTensor indices = poisoned_topk_output(p.rows, k);
  EXPECT_TRUE(mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                         p.ke.view(), {}, options)
                  .ok());
  EXPECT_TRUE(indexer_prefill(indices.view(), p.q.view(), p.keys.view(), p.weights.view(),
                              p.ks.view(), p.ke.view(), k, TopKOptions{.sorted = true}, options)
                  .ok());
  const float* logit_data = logits.data<float>();
  const int32_t* index_data = indices.data<int32_t>();
  return {std::vector<float>(logit_data, logit_data + p.rows * p.num_keys),
          std::vector<int32_t>(index_data, index_data + p.rows * k)};
}

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = float_bits(values[i]);
  return bits;
}

TEST(CpuTargets, EveryTargetGivesTheSameLogitsAndSelection) {
  FI_SEEDED_RNG(rng);
  const PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 9, 700, 64, 128);
  const int k = 100;
  std::vector<uint32_t> first_logits;
  std::vector<int32_t> first_indices;
  std::string first_target;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    ForcedTarget forced(target);
    SCOPED_TRACE(hwy::TargetName(target));
    const PrefillOutputs outputs = run_prefill(p, k, 2);
    if (first_target.empty()) {
      first_target = hwy::TargetName(target);
      first_logits = bits_of(outputs.logits);
      first_indices = outputs.indices;
      continue;
    }
    EXPECT_EQ(bits_of(outputs.logits), first_logits) << "logit bits differ from " << first_target;
    EXPECT_EQ(outputs.indices, first_indices) << "selection differs from " << first_target;
  }
  EXPECT_FALSE(first_target.empty());
}

TEST(CpuTargets, EveryTargetMatchesTheReferenceWithinTolerance) {
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    const PrefillProblem p = make_prefill_problem(rng, format, 6, 300, 32, 64);
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      ForcedTarget forced(target);
      SCOPED_TRACE(hwy::TargetName(target));
      const PrefillOutputs outputs = run_prefill(p, 16, 1);
      for (int64_t t = 0; t < p.rows; ++t) {
        for (int64_t s = p.ks.data<int32_t>()[t]; s < p.ke.data<int32_t>()[t]; ++s) {
          const reference::Score want =
              reference::prefill_score(p.q.view(), p.keys.view(), p.weights.view(), t, s);
          ASSERT_NEAR(outputs.logits[t * p.num_keys + s], want.value,
                      logit_tolerance(p.head_dim, p.heads, want.magnitude))
              << "row " << t << " key " << s;
        }
      }
    }
  }
}

TEST(CpuTargets, ResultsIndependentOfThreadCountOnEveryTarget) {
  FI_SEEDED_RNG(rng);
  const PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 13, 900, 32, 128);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    ForcedTarget forced(target);
    SCOPED_TRACE(hwy::TargetName(target));
    const PrefillOutputs one = run_prefill(p, 64, 1);
    for (int threads : {2, 3, 8}) {
      const PrefillOutputs many = run_prefill(p, 64, threads);
      EXPECT_EQ(bits_of(many.logits), bits_of(one.logits)) << threads << " threads";
      EXPECT_EQ(many.indices, one.indices) << threads << " threads";
    }
  }
}

// The SIMD tile load converts keys in groups of 8 and sends a group holding a NaN code to the
// exact table; both must give the exact value of every code and +qNaN for both NaN codes, for
// every key count (full groups and a tail) and at any byte alignment of the keys.
TEST(CpuTargets, KeyTileLoadGivesTheExactValueOfEveryCode) {
  FI_SEEDED_RNG(rng);
  constexpr uint32_t kQuietNanBits = 0x7FC00000u;
  std::vector<uint8_t> numbers;  // every code but the two NaN codes, in random order
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) != 0x7F) numbers.push_back(static_cast<uint8_t>(code));
  }
  rng.shuffle(numbers);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    ForcedTarget forced(target);
    for (int head_dim : {64, 128}) {
      for (int count : {1, 7, 8, 9, 31, 40, 47, cpu::kKeyTile}) {
        for (int nan_codes : {0, 1, 3}) {
          SCOPED_TRACE(::testing::Message() << hwy::TargetName(target) << " D=" << head_dim
                                            << " keys=" << count << " NaN codes=" << nan_codes);
          const int64_t misalignment = rng.uniform_int(0, 63);
          std::vector<uint8_t> bytes(misalignment + static_cast<size_t>(count) * head_dim);
          uint8_t* codes = bytes.data() + misalignment;
          for (int64_t i = 0; i < static_cast<int64_t>(count) * head_dim; ++i) {
            codes[i] = numbers[(i + count) % numbers.size()];
          }
          for (int n = 0; n < nan_codes; ++n) {
            codes[rng.uniform_int(0, static_cast<int64_t>(count) * head_dim - 1)] =
                rng.bernoulli(0.5) ? 0x7F : 0xFF;
          }
          const uint8_t* keys[cpu::kKeyTile];
          for (int i = 0; i < count; ++i) keys[i] = codes + static_cast<int64_t>(i) * head_dim;
          const auto tile = std::make_unique<cpu::KeyTile>();  // aligned as the scoring tile
          cpu::decode_fp8_tile(tile->values, keys, count, head_dim);
          for (int i = 0; i < count; ++i) {
            for (int d = 0; d < head_dim; ++d) {
              const uint8_t code = keys[i][d];
              const uint32_t want =
                  (code & 0x7F) == 0x7F ? kQuietNanBits : float_bits(e4m3_to_float(code));
              ASSERT_EQ(float_bits(tile->values[d * cpu::kKeyTile + i]), want)
                  << "key " << i << " dim " << d << " code " << int{code};
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace fitest
