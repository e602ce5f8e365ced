// SPDX-License-Identifier: Apache-2.0
// Shared by the CUDA scoring tests (logits_test.cpp, mxfp4_test.cpp): DeepGEMM's diff metric, a
// logits buffer's bits, and a scoring run on the GPU into a poisoned buffer.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/compare.h"
#include "support/cuda.h"

namespace fitest {

inline constexpr int kRepeats = 20;

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
inline HostTensor run_on_gpu(const DeviceProblem& device, int64_t rows, int64_t width, int64_t row_stride,
                      bool clean) {
  HostTensor logits = poisoned_logits(rows, width, row_stride);
  DeviceTensor out = to_device(logits);
  const Status status = device.run(out, clean);
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(logits, out);
  return logits;
}

// The GPU's paged logits of p (clean) against the CPU backend's: DeepGEMM's diff over the visible
// entries, finite there, -inf past each row's end.
inline void ExpectPagedMatchesTheCpuBackend(DecodeProblem p) {
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

}  // namespace fitest
