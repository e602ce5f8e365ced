// SPDX-License-Identifier: Apache-2.0
// What the CUDA DCP tests share: poisoned candidates, the CPU and GPU merges of one simulated
// case, and the check that they equal topk_per_row over the concatenated rows.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "flashindexer/dist.h"
#include "support/cuda.h"
#include "support/dcp_simulation.h"

namespace fitest {

inline constexpr int kRepeats = 10;
inline constexpr uint64_t kPoisonKey = 0xA5A5A5A5A5A5A5A5ull;

inline std::vector<uint8_t> bytes_of(const HostTensor& t) {
  return std::vector<uint8_t>(t.bytes(), t.bytes() + t.byte_size());
}

inline HostTensor poisoned_candidates(int64_t rows, int64_t cols) {
  HostTensor t(DType::kI64, {rows, cols});
  t.fill<uint64_t>(kPoisonKey);
  return t;
}

// The CPU merge of `gathered`: what every CUDA merge with the same order must reproduce bit for
// bit.
inline HostTensor cpu_merge(const TensorView& gathered, const DcpCase& c, int64_t out_cols,
                            bool sorted) {
  HostTensor merged = poisoned_topk_output(c.rows, out_cols);
  const Status status = dcp_merge_topk(merged.view(), gathered, c.k, c.ranks, TopKOptions{sorted});
  EXPECT_TRUE(status.ok()) << status_text(status);
  return merged;
}

// The simulation on the device: every rank's inputs, plus one [N, rows, k] gathered buffer that
// the CUDA packs fill block by block, as an in-place ncclAllGather would.
struct DeviceDcp {
  std::vector<DeviceTensor> logits, local_topk, row_starts;
  DeviceTensor gathered_nccl;

  DeviceDcp(const DcpSimulation& sim, const DcpCase& c) {
    for (const DcpRankInputs& in : sim.ranks) {
      logits.push_back(to_device(in.logits));
      local_topk.push_back(to_device(in.local_topk));
      row_starts.push_back(c.prefill ? to_device(in.row_starts) : DeviceTensor{});
    }
    gathered_nccl = to_device(poisoned_candidates(c.ranks, c.rows * c.k));
    gathered_nccl.view = TensorView::contiguous(gathered_nccl.buffer.get(), DType::kI64,
                                                {c.ranks, c.rows, c.k}, Device::kCUDA);
  }

  // Rank r's block of the gathered buffer as a [rows, k] view.
  TensorView block(const DcpCase& c, int rank) const {
    return TensorView::contiguous(static_cast<int64_t*>(gathered_nccl.buffer.get()) +
                                      static_cast<int64_t>(rank) * c.rows * c.k,
                                  DType::kI64, {c.rows, c.k}, Device::kCUDA);
  }

  Status pack(const DcpCase& c, int rank, const TensorView& candidates,
              cudaStream_t stream = nullptr) const {
    RunOptions options;
    options.cuda_stream = stream;
    return dcp_pack_candidates(candidates, logits[rank].view, local_topk[rank].view,
                               row_starts[rank].view, c.k, rank, {c.ranks, c.interleave}, options);
  }

  // Packs every rank into the gathered buffer and merges it into `out`.
  Status pack_and_merge(const DcpCase& c, const TensorView& out, bool sorted,
                        cudaStream_t stream = nullptr) const {
    for (int rank = 0; rank < c.ranks; ++rank) {
      if (Status status = pack(c, rank, block(c, rank), stream); !status.ok()) return status;
    }
    RunOptions options;
    options.cuda_stream = stream;
    return dcp_merge_topk(out, nccl_layout_view(gathered_nccl.view), c.k, c.ranks,
                          TopKOptions{sorted}, options);
  }
};

// Runs the CUDA merge of `gathered` (a device view) into a poisoned [rows, k + 3] output.
inline HostTensor gpu_merge(const TensorView& gathered, const DcpCase& c, bool sorted) {
  HostTensor merged = poisoned_topk_output(c.rows, c.k + 3);
  DeviceTensor out = to_device(merged);
  const Status status = dcp_merge_topk(out.view, gathered, c.k, c.ranks, TopKOptions{sorted});
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(merged, out);
  return merged;
}

// The CUDA merge result against the CPU merge of the same order (bits) and the single-GPU top-k.
inline ::testing::AssertionResult MergeMatches(const HostTensor& got, const HostTensor& cpu,
                                               const DcpSimulation& sim, const DcpCase& c,
                                               bool sorted) {
  if (bytes_of(got) != bytes_of(cpu)) {
    for (int64_t t = 0; t < c.rows; ++t) {
      ::testing::AssertionResult row =
          TopKRowMatches(topk_row(got, t, c.k), topk_row(cpu, t, c.k), sorted);
      if (!row)
        return ::testing::AssertionFailure() << "vs CPU merge, row " << t << ": " << row.message();
    }
    return ::testing::AssertionFailure() << "differs from the CPU merge beyond column k";
  }
  ::testing::AssertionResult same = SameTopK(got, sim.expected, c.k, sorted);
  if (!same) return ::testing::AssertionFailure() << "vs topk_per_row: " << same.message();
  return ::testing::AssertionSuccess();
}

inline void check_case(Rng& rng, const DcpCase& c) {
  SCOPED_TRACE(describe(c));
  const DcpSimulation sim = simulate_dcp(rng, c);
  const HostTensor cpu_sorted = cpu_merge(sim.gathered.view(), c, c.k + 3, true);
  const HostTensor cpu_unsorted = cpu_merge(sim.gathered.view(), c, c.k + 3, false);
  const DeviceDcp device(sim, c);

  // Pack: bit-identical to the CPU, columns >= k untouched.
  for (int rank = 0; rank < c.ranks; ++rank) {
    HostTensor packed = poisoned_candidates(c.rows, c.k + 2);
    DeviceTensor packed_device = to_device(packed);
    FI_ASSERT_OK(device.pack(c, rank, packed_device.view));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(packed, packed_device);
    for (int64_t t = 0; t < c.rows; ++t) {
      for (int i = 0; i < c.k + 2; ++i) {
        const uint64_t want = i < c.k ? sim.ranks[rank].packed.at<uint64_t>({t, i}) : kPoisonKey;
        ASSERT_EQ(packed.at<uint64_t>({t, i}), want)
            << "rank " << rank << " row " << t << " slot " << i;
      }
    }
  }

  // Merge of the CPU-packed candidates, in both layouts and both orders.
  const DeviceTensor gathered = to_device(sim.gathered);
  DeviceTensor gathered_nccl = to_device(sim.gathered_nccl);
  for (bool sorted : {true, false}) {
    const HostTensor& cpu = sorted ? cpu_sorted : cpu_unsorted;
    EXPECT_TRUE(MergeMatches(gpu_merge(gathered.view, c, sorted), cpu, sim, c, sorted))
        << "[rows, N k] sorted=" << sorted;
    EXPECT_TRUE(MergeMatches(gpu_merge(nccl_layout_view(gathered_nccl.view), c, sorted), cpu, sim,
                             c, sorted))
        << "[N, rows, k] viewed as [rows, N, k] sorted=" << sorted;
  }

  // The whole device path: CUDA packs into the gathered buffer, CUDA merge; repeats bit-identical.
  HostTensor merged = poisoned_topk_output(c.rows, c.k + 3);
  DeviceTensor out = to_device(merged);
  FI_ASSERT_OK(device.pack_and_merge(c, out.view, false));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(merged, out);
  EXPECT_TRUE(MergeMatches(merged, cpu_unsorted, sim, c, false)) << "CUDA pack + merge";
  const std::vector<uint8_t> first = bytes_of(merged);
  for (int repeat = 0; repeat < 2; ++repeat) {
    HostTensor again = poisoned_topk_output(c.rows, c.k + 3);
    DeviceTensor again_device = to_device(again);
    FI_ASSERT_OK(device.pack_and_merge(c, again_device.view, false));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(again, again_device);
    ASSERT_EQ(bytes_of(again), first) << "repeat " << repeat;
  }
}

}  // namespace fitest
