// SPDX-License-Identifier: Apache-2.0
// Random prefill batches, row-bound options and their chunk plans, shared by the host tests of
// the chunk row bounds (tests/cpp/api/planning_bounds_test.cpp) and the CUDA tensor op's tests
// against them (tests/cuda/planning_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "support/compare.h"
#include "support/seed.h"

namespace fitest {

struct PrefillBatch {
  std::vector<int64_t> seq_lens, query_lens;
};

// One chunk's outputs: ks / ke a row, token_to_seq a workspace key.
struct ChunkBounds {
  std::vector<int32_t> ks, ke, token_to_seq;
};

// min_requests .. max_requests requests of S_r in [0, max_len] and M_r <= S_r (all of it 30 % of
// the time).
inline PrefillBatch random_prefill_batch(Rng& rng, int64_t max_requests, int64_t max_len,
                                         int64_t min_requests = 1) {
  PrefillBatch batch;
  const int64_t requests = rng.uniform_int(min_requests, max_requests);
  for (int64_t r = 0; r < requests; ++r) {
    const int64_t seq_len = rng.uniform_int(0, max_len);
    batch.seq_lens.push_back(seq_len);
    batch.query_lens.push_back(rng.bernoulli(0.3) ? seq_len : rng.uniform_int(0, seq_len));
  }
  return batch;
}

// Compress ratio 1 (most often), 2, 4 or 128; half the time a DCP group of 1..4 ranks.
inline RowBoundsOptions random_bounds_options(Rng& rng) {
  RowBoundsOptions options;
  options.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 1, 2, 4, 128}));
  if (rng.bernoulli(0.5)) {
    options.dcp = {static_cast<int>(rng.uniform_int(1, 4)),
                   static_cast<int>(rng.uniform_int(1, 3))};
    options.dcp_rank = static_cast<int>(rng.uniform_int(0, options.dcp.ranks - 1));
  }
  return options;
}

// Plans the batch (the planner sees the compressed lengths) under a random budget of up to
// max_workspace_keys keys.
inline std::vector<PrefillChunk> plan_prefill_batch(Rng& rng, const PrefillBatch& batch,
                                                    int compress_ratio,
                                                    int64_t max_workspace_keys = 200) {
  std::vector<int64_t> key_lens;
  for (int64_t s : batch.seq_lens) key_lens.push_back(s / compress_ratio);
  std::vector<PrefillChunk> chunks;
  const Status status =
      plan_prefill_chunks(chunks, key_lens, batch.query_lens,
                          {rng.uniform_int(1, max_workspace_keys),
                           rng.uniform_int(4, 4 * 20 * max_workspace_keys), rng.uniform_int(0, 3)});
  EXPECT_TRUE(status.ok()) << status_text(status);
  return chunks;
}

}  // namespace fitest
