// SPDX-License-Identifier: Apache-2.0
// The GPU top-k's launch arithmetic (cuda/topk/params.h), white-box: host computations the
// kernels repeat per row. No GPU needed.
#include <gtest/gtest.h>

#include "cuda/topk/params.h"
#include "flashindexer/flashindexer.h"

namespace {

TEST(TopKLaunch, SelectionCapacityIsKRoundedUpToAPowerOfTwo) {
  // Host arithmetic (the kernels compute it per row too): the loop it replaced, for every k.
  for (int k = 0; k <= 2 * flashindexer::kMaxTopK + 1; ++k) {
    int expected = 1;
    while (expected < k) expected *= 2;
    ASSERT_EQ(flashindexer::cuda::topk::selection_capacity(k), expected) << "k=" << k;
  }
}

}  // namespace
