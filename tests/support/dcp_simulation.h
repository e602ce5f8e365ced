// SPDX-License-Identifier: Apache-2.0
// DCP with simulated ranks, shared by the CPU (tests/cpp/api/dist_test.cpp) and GPU
// (tests/cuda/dcp_test.cpp) tests: random rows of keys in global order, the single-GPU answer
// (topk_per_row over the concatenated rows), and for every rank its shard's logits, local top-k
// and packed candidates.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/checks.h"
#include "flashindexer/dist.h"
#include "support/compare.h"

namespace fitest {

struct DcpCase {
  int ranks = 2;
  int interleave = 1;
  int k = 64;
  bool prefill = false;
  Fill fill = Fill::kRandom;
  int64_t rows = 6;
};

// One row's visible length: empty, shorter than N*I (some ranks hold nothing), around k, around
// N*k (every rank full), or random.
inline int64_t random_length(Rng& rng, const DcpCase& c) {
  const int64_t span = static_cast<int64_t>(c.ranks) * c.interleave;
  switch (rng.uniform_int(0, 5)) {
    case 0:
      return 0;
    case 1:
      return rng.uniform_int(1, span - 1 > 0 ? span - 1 : 1);
    case 2:
      return std::max<int64_t>(1, c.k + rng.uniform_int(-2, 2));
    case 3:
      return std::max<int64_t>(0,
                               static_cast<int64_t>(c.ranks) * c.k + rng.uniform_int(-span, span));
    default:
      return rng.uniform_int(1, static_cast<int64_t>(c.ranks + 1) * c.k + 3 * span);
  }
}

// Row starts for a prefill row: an odd offset so that nothing is aligned.
inline int64_t random_start(Rng& rng) { return 2 * rng.uniform_int(0, 20) + 1; }

// What one rank holds and computes.
struct DcpRankInputs {
  HostTensor logits;      // [rows, local width] f32: the rank's keys at [start, start + len)
  HostTensor local_topk;  // [rows, k] i32: topk_per_row over the rank's keys
  HostTensor row_starts;  // [rows] i32 local ks (prefill; empty for decode)
  HostTensor packed;      // [rows, k] i64: dcp_pack_candidates on the CPU
  TensorView row_starts_view() const { return row_starts.view(); }
};

// The rows of keys in global order, the reference result over the concatenated rows, and each
// rank's inputs and packed candidates, gathered in both layouts.
struct DcpSimulation {
  HostTensor expected;       // [rows, k] i32: topk_per_row over the un-sharded rows, sorted
  HostTensor gathered;       // [rows, N * k] i64
  HostTensor gathered_nccl;  // [N, rows, k] i64: the layout of an ncclAllGather
  std::vector<DcpRankInputs> ranks;
};

// The [N, rows, k] buffer viewed as [rows, N, k] (no transpose).
inline TensorView nccl_layout_view(const TensorView& gathered_nccl) {
  TensorView view = gathered_nccl;
  std::swap(view.shape[0], view.shape[1]);
  std::swap(view.stride[0], view.stride[1]);
  return view;
}

inline DcpSimulation simulate_dcp(Rng& rng, const DcpCase& c) {
  const DcpGroup group{c.ranks, c.interleave};
  std::vector<std::vector<float>> keys(c.rows);
  for (auto& row : keys) {
    row.resize(static_cast<size_t>(random_length(rng, c)));
    for (float& value : row) value = random_logit(rng, c.fill);
  }

  // Single GPU: topk_per_row over the concatenated row, columns [start, start + length).
  int64_t full_width = 1;
  std::vector<int64_t> full_start(c.rows);
  for (int64_t t = 0; t < c.rows; ++t) {
    full_start[t] = c.prefill ? random_start(rng) : 0;
    full_width =
        std::max<int64_t>(full_width, full_start[t] + static_cast<int64_t>(keys[t].size()));
  }
  HostTensor full = poisoned_logits(c.rows, full_width);
  HostTensor ks(DType::kI32, {c.rows}), ke(DType::kI32, {c.rows}), lengths(DType::kI32, {c.rows});
  for (int64_t t = 0; t < c.rows; ++t) {
    const int64_t length = static_cast<int64_t>(keys[t].size());
    for (int64_t s = 0; s < length; ++s) full.at<float>({t, full_start[t] + s}) = keys[t][s];
    ks.data<int32_t>()[t] = static_cast<int32_t>(full_start[t]);
    ke.data<int32_t>()[t] = static_cast<int32_t>(full_start[t] + length);
    lengths.data<int32_t>()[t] = static_cast<int32_t>(length);
  }
  DcpSimulation sim;
  sim.expected = HostTensor(DType::kI32, {c.rows, c.k});
  const RowRanges full_ranges =
      c.prefill ? RowRanges::prefill(ks.view(), ke.view()) : RowRanges::decode(lengths.view());
  EXPECT_TRUE(
      topk_per_row(sim.expected.view(), full.view(), full_ranges, c.k, TopKOptions{true}).ok());

  // DCP: each rank holds its shard, runs topk_per_row on it and packs its winners.
  sim.gathered = HostTensor(DType::kI64, {c.rows, static_cast<int64_t>(c.ranks) * c.k});
  sim.gathered_nccl = HostTensor(DType::kI64, {c.ranks, c.rows, c.k});
  for (int rank = 0; rank < c.ranks; ++rank) {
    std::vector<int64_t> local_start(c.rows);
    int64_t local_width = 1;
    for (int64_t t = 0; t < c.rows; ++t) {
      local_start[t] = c.prefill ? random_start(rng) : 0;
      const int64_t local_length = dcp_local_len(static_cast<int64_t>(keys[t].size()), rank, group);
      local_width = std::max(local_width, local_start[t] + local_length);
    }
    DcpRankInputs in;
    in.logits = poisoned_logits(c.rows, local_width);
    HostTensor local_ks(DType::kI32, {c.rows}), local_ke(DType::kI32, {c.rows});
    HostTensor local_lengths(DType::kI32, {c.rows});
    for (int64_t t = 0; t < c.rows; ++t) {
      int64_t local_length = 0;
      for (int64_t g = 0; g < static_cast<int64_t>(keys[t].size()); ++g) {
        if (dcp_owner(g, group) != rank) continue;
        EXPECT_EQ(dcp_local(g, group), local_length);
        in.logits.at<float>({t, local_start[t] + local_length++}) = keys[t][g];
      }
      local_ks.data<int32_t>()[t] = static_cast<int32_t>(local_start[t]);
      local_ke.data<int32_t>()[t] = static_cast<int32_t>(local_start[t] + local_length);
      local_lengths.data<int32_t>()[t] = static_cast<int32_t>(local_length);
    }
    const RowRanges local_ranges = c.prefill ? RowRanges::prefill(local_ks.view(), local_ke.view())
                                             : RowRanges::decode(local_lengths.view());
    in.local_topk = poisoned_topk_output(c.rows, c.k);
    EXPECT_TRUE(topk_per_row(in.local_topk.view(), in.logits.view(), local_ranges, c.k).ok());
    if (c.prefill) in.row_starts = std::move(local_ks);
    in.packed = HostTensor(DType::kI64, {c.rows, c.k});
    const Status packed_status =
        dcp_pack_candidates(in.packed.view(), in.logits.view(), in.local_topk.view(),
                            in.row_starts_view(), c.k, rank, group);
    EXPECT_TRUE(packed_status.ok()) << status_text(packed_status);
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int i = 0; i < c.k; ++i) {
        const int64_t key = in.packed.at<int64_t>({t, i});
        sim.gathered.at<int64_t>({t, static_cast<int64_t>(rank) * c.k + i}) = key;
        sim.gathered_nccl.at<int64_t>({rank, t, i}) = key;
      }
    }
    sim.ranks.push_back(std::move(in));
  }
  return sim;
}

inline std::string describe(const DcpCase& c) {
  return flashindexer::concat("N=", c.ranks, " I=", c.interleave, " k=", c.k,
                              c.prefill ? " prefill" : " decode",
                              " fill=", static_cast<int>(c.fill), " rows=", c.rows);
}

}  // namespace fitest
