// SPDX-License-Identifier: Apache-2.0
// Ceiling microkernels for `flashindexer bench`, written with Highway so that they use the same
// SIMD target the library's kernels dispatch to.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cli/ceilings.cpp"
#include "cli/ceilings.h"

#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cli {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 12 independent accumulators hide the multiply-add latency (4-5 cycles at 2 per cycle) on
// every x86 core; returns the FLOP done (2 per lane per multiply-add).
double FmaLoop(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, 0.999999f);
  const auto b = hn::Set(d, 1e-7f);
  // Distinct starting values: twelve equal chains are one chain to the compiler, which then
  // emits a single dependent multiply-add per iteration (and the count below would be 12x off).
  auto c0 = hn::Set(d, 1.0f), c1 = hn::Set(d, 1.01f), c2 = hn::Set(d, 1.02f);
  auto c3 = hn::Set(d, 1.03f), c4 = hn::Set(d, 1.04f), c5 = hn::Set(d, 1.05f);
  auto c6 = hn::Set(d, 1.06f), c7 = hn::Set(d, 1.07f), c8 = hn::Set(d, 1.08f);
  auto c9 = hn::Set(d, 1.09f), c10 = hn::Set(d, 1.10f), c11 = hn::Set(d, 1.11f);
  for (int64_t i = 0; i < iterations; ++i) {
    c0 = hn::MulAdd(c0, a, b);
    c1 = hn::MulAdd(c1, a, b);
    c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b);
    c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b);
    c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b);
    c10 = hn::MulAdd(c10, a, b);
    c11 = hn::MulAdd(c11, a, b);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)),
                           hn::Add(hn::Add(hn::Add(c4, c5), hn::Add(c6, c7)),
                                   hn::Add(hn::Add(c8, c9), hn::Add(c10, c11))));
  *sink = hn::GetLane(sum);
  return 2.0 * 12 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

// Sums n floats (n a multiple of 4 vectors) with four independent accumulators.
float SumStream(const float* HWY_RESTRICT data, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t i = 0; i + 4 * lanes <= n; i += 4 * lanes) {
    s0 = hn::Add(s0, hn::LoadU(d, data + i));
    s1 = hn::Add(s1, hn::LoadU(d, data + i + lanes));
    s2 = hn::Add(s2, hn::LoadU(d, data + i + 2 * lanes));
    s3 = hn::Add(s3, hn::LoadU(d, data + i + 3 * lanes));
  }
  return hn::GetLane(hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::cli
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::cli {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(SumStream);
HWY_EXPORT(TargetName);

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

constexpr int64_t kFmaIterations = int64_t{1} << 26;
constexpr int64_t kStreamFloats = int64_t{1} << 28;  // 1 GiB: far beyond any last-level cache
constexpr int kTrials = 3;

}  // namespace

Ceilings measure_ceilings(int threads) {
  Ceilings ceilings;
  ceilings.simd_target = HWY_DYNAMIC_DISPATCH(TargetName)();
  std::vector<float> sinks(threads * 16);
  for (int trial = 0; trial < kTrials; ++trial) {
    double flop = 0;
    const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flop)
    flop += HWY_DYNAMIC_DISPATCH(FmaLoop)(kFmaIterations, &sinks[omp_get_thread_num() * 16]);
    ceilings.fma_gflops = std::max(ceilings.fma_gflops, flop / seconds_since(start) / 1e9);
  }
  std::vector<float> stream(kStreamFloats);
  // Each thread first touches the part it will read, so pages sit near that thread.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < kStreamFloats; ++i) stream[i] = static_cast<float>(i & 1023);
  for (int trial = 0; trial < kTrials; ++trial) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t chunk = kStreamFloats / threads;
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
      sinks[t * 16] += HWY_DYNAMIC_DISPATCH(SumStream)(stream.data() + t * chunk, chunk);
    }
    ceilings.read_gbytes =
        std::max(ceilings.read_gbytes, kStreamFloats * sizeof(float) / seconds_since(start) / 1e9);
  }
  return ceilings;
}

}  // namespace flashindexer::cli
#endif  // HWY_ONCE
