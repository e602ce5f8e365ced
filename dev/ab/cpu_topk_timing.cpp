// SPDX-License-Identifier: Apache-2.0
// CPU topk_per_row timed in-process: for comparing two builds of the CPU selection on a noisy
// machine, where the minimum of many calls moves less than the bench's medians.
//
//   taskset -c 1 build/flashindexer_cpu_topk_timing [k=2048] [rows=128] [threads=1]
//
// N(0,1) fp32 rows of 131072 keys (fixed seed), full rows, unsorted; 21 timed calls after one
// warm-up, printed as min and median in ms.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "flashindexer/flashindexer.h"

int main(int argc, char** argv) {
  namespace fi = flashindexer;
  const int k = argc > 1 ? std::atoi(argv[1]) : 2048;
  const int64_t rows = argc > 2 ? std::atoll(argv[2]) : 128;
  const int threads = argc > 3 ? std::atoi(argv[3]) : 1;
  constexpr int64_t kWidth = 131072;
  constexpr int kCalls = 21;
  std::vector<float> logits(static_cast<size_t>(rows * kWidth));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& x : logits) x = normal(rng);
  std::vector<int32_t> out(static_cast<size_t>(rows * k));
  std::vector<int32_t> starts(static_cast<size_t>(rows), 0);
  std::vector<int32_t> ends(static_cast<size_t>(rows), static_cast<int32_t>(kWidth));
  const fi::RowRanges ranges =
      fi::RowRanges::prefill(fi::TensorView::contiguous(starts.data(), fi::DType::kI32, {rows}),
                             fi::TensorView::contiguous(ends.data(), fi::DType::kI32, {rows}));
  fi::RunOptions options;
  options.cpu_threads = threads;
  std::vector<double> times;
  for (int call = 0; call <= kCalls; ++call) {
    const auto begin = std::chrono::steady_clock::now();
    const fi::Status status =
        fi::topk_per_row(fi::TensorView::contiguous(out.data(), fi::DType::kI32, {rows, k}),
                         fi::TensorView::contiguous(logits.data(), fi::DType::kF32, {rows, kWidth}),
                         ranges, k, fi::TopKOptions{false}, options);
    const auto end = std::chrono::steady_clock::now();
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    if (call > 0) times.push_back(std::chrono::duration<double, std::milli>(end - begin).count());
  }
  std::sort(times.begin(), times.end());
  std::printf("topk_per_row %lldx%lld f32 k=%d, %d thread(s): min %.3f ms, median %.3f ms\n",
              static_cast<long long>(rows), static_cast<long long>(kWidth), k, threads, times[0],
              times[times.size() / 2]);
  return 0;
}
