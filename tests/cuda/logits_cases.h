// SPDX-License-Identifier: Apache-2.0
// What the CUDA logits tests share (logits_test.cpp, mxfp4_scoring_test.cpp): DeepGEMM's diff
// metric, a logits buffer as its bits, and a problem run on the GPU into a poisoned buffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/compare.h"
#include "support/cuda.h"

namespace fitest {

// DeepGEMM's calc_diff over the entries both mark visible: 1 - 2 sum(xy) / sum(x^2 + y^2).
inline double calc_diff(const HostTensor& got, const HostTensor& expected,
                        const std::vector<int64_t>& starts, const std::vector<int64_t>& ends) {
  double xy = 0.0;
  double sq = 0.0;
  for (int64_t t = 0; t < got.size(0); ++t) {
    for (int64_t s = starts[t]; s < ends[t]; ++s) {
      const double x = got.at<float>({t, s});
      const double y = expected.at<float>({t, s});
      xy += x * y;
      sq += x * x + y * y;
    }
  }
  return sq == 0.0 ? 0.0 : 1.0 - 2.0 * xy / sq;
}

inline std::vector<uint32_t> bits_of(const HostTensor& t) {
  const auto* words = t.data<uint32_t>();
  return std::vector<uint32_t>(words, words + t.byte_size() / 4);
}

// Runs `device` (a DevicePrefill or DevicePaged) on the GPU into a poisoned logits buffer of
// rows x width (row stride row_stride) and copies it back.
template <typename DeviceProblem>
HostTensor run_on_gpu(const DeviceProblem& device, int64_t rows, int64_t width, int64_t row_stride,
                      bool clean) {
  HostTensor logits = poisoned_logits(rows, width, row_stride);
  DeviceTensor out = to_device(logits);
  const Status status = device.run(out, clean);
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(logits, out);
  return logits;
}

}  // namespace fitest
