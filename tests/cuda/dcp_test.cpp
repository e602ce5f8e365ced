// SPDX-License-Identifier: Apache-2.0
// DCP pack and merge on CUDA tensors with simulated ranks: CUDA pack == CPU pack bit for bit,
// CUDA pack + merge == CPU merge == topk_per_row over the concatenated rows (same ids, same
// order), for both gathered layouts; ties across ranks, NaN and infinities, empty ranks and rows,
// duplicate candidates, device-side clamping of unchecked values, poisoned outputs, bit-identical
// repeats and graph capture. Kernel tests skip without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "dcp_cases.h"
#include "flashindexer/dist.h"
#include "support/cuda.h"
#include "support/dcp_simulation.h"

namespace fitest {
namespace {

TEST(DcpCuda, PackAndMergeEqualCpuAndTopKOverConcatenatedKeys) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int ranks : {2, 3, 4, 8}) {
    for (int interleave : {1, 2, 3}) {
      for (int k : {1, 512, 2048}) {
        for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
          const DcpCase c{ranks, interleave, k, rng.bernoulli(0.5), fill, k >= 512 ? 3 : 7};
          check_case(rng, c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST(DcpCuda, PrefillRowStartsAndDecodeBothExact) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (bool prefill : {false, true}) {
    check_case(rng, DcpCase{4, 2, 64, prefill, Fill::kFewTies, 40});
    check_case(rng, DcpCase{3, 3, 1000, prefill, Fill::kSpecial, 5});
  }
}

TEST(DcpCuda, ManyRanksBeyondEight) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  check_case(rng, DcpCase{16, 1, 2048, true, Fill::kFewTies, 2});
  check_case(rng, DcpCase{13, 2, 300, false, Fill::kRandom, 4});
}

TEST(DcpCuda, OneRankIsTheLocalTopK) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int k : {1, 512, 2048}) check_case(rng, DcpCase{1, 1, k, true, Fill::kSpecial, 4});
}

TEST(DcpCuda, TiesAcrossRanksGoToTheSmallerGlobalId) {
  SKIP_WITHOUT_GPU();
  // Every key scores the same: the global top-k is ids 0 .. k-1, spread over all ranks.
  for (int interleave : {1, 2, 3}) {
    const int ranks = 4;
    const int k = 512;
    const int64_t length = 5000;
    const DcpGroup group{ranks, interleave};
    DeviceTensor gathered = to_device(poisoned_candidates(1, ranks * k));
    for (int rank = 0; rank < ranks; ++rank) {
      HostTensor local(DType::kF32, {1, dcp_local_len(length, rank, group)});
      local.fill<float>(0.5f);
      HostTensor lengths = i32_tensor({static_cast<int32_t>(local.size(1))});
      HostTensor local_topk = poisoned_topk_output(1, k);
      FI_ASSERT_OK(
          topk_per_row(local_topk.view(), local.view(), RowRanges::decode(lengths.view()), k));
      const DeviceTensor local_device = to_device(local);
      const DeviceTensor topk_device = to_device(local_topk);
      const TensorView block =
          TensorView::contiguous(static_cast<int64_t*>(gathered.buffer.get()) + rank * k,
                                 DType::kI64, {1, k}, Device::kCUDA);
      FI_ASSERT_OK(dcp_pack_candidates(block, local_device.view, topk_device.view, TensorView{}, k,
                                       rank, group));
    }
    HostTensor merged = poisoned_topk_output(1, k);
    DeviceTensor out = to_device(merged);
    FI_ASSERT_OK(dcp_merge_topk(out.view, gathered.view, k, ranks));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(merged, out);
    for (int i = 0; i < k; ++i) ASSERT_EQ(merged.at<int32_t>({0, i}), i) << "I=" << interleave;
  }
}

TEST(DcpCuda, NanRanksBelowMinusInfinityAndAboveEmptySlots) {
  SKIP_WITHOUT_GPU();
  // Rank 0 holds a NaN and +inf, rank 1 holds -inf and -0.0: k = 6 of 4 keys.
  const DcpGroup group{2, 1};
  const float scores[2][2] = {{bits_float(0x7FC00000u), kInf}, {-kInf, -0.0f}};
  DeviceTensor gathered = to_device(poisoned_candidates(1, 12));
  for (int rank = 0; rank < 2; ++rank) {
    HostTensor local(DType::kF32, {1, 2});
    local.at<float>({0, 0}) = scores[rank][0];
    local.at<float>({0, 1}) = scores[rank][1];
    HostTensor local_topk(DType::kI32, {1, 6});
    local_topk.fill<int32_t>(-1);
    local_topk.at<int32_t>({0, 0}) = 1;
    local_topk.at<int32_t>({0, 3}) = 0;
    const DeviceTensor local_device = to_device(local);
    const DeviceTensor topk_device = to_device(local_topk);
    const TensorView block =
        TensorView::contiguous(static_cast<int64_t*>(gathered.buffer.get()) + rank * 6, DType::kI64,
                               {1, 6}, Device::kCUDA);
    FI_ASSERT_OK(dcp_pack_candidates(block, local_device.view, topk_device.view, TensorView{}, 6,
                                     rank, group));
  }
  // Global ids: rank 0 holds 0 (NaN), 2 (+inf); rank 1 holds 1 (-inf), 3 (-0.0).
  for (bool sorted : {true, false}) {
    HostTensor merged = poisoned_topk_output(1, 6);
    DeviceTensor out = to_device(merged);
    FI_ASSERT_OK(dcp_merge_topk(out.view, gathered.view, 6, 2, TopKOptions{sorted}));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(merged, out);
    EXPECT_EQ(topk_row(merged, 0, 6), sorted ? (std::vector<int32_t>{2, 3, 1, 0, -1, -1})
                                             : (std::vector<int32_t>{0, 1, 2, 3, -1, -1}));
  }
}

TEST(DcpCuda, RowsWithoutCandidatesAreAllMinusOne) {
  SKIP_WITHOUT_GPU();
  HostTensor gathered(DType::kI64, {3, 8 * 2048});  // all zero: empty slots only
  const DeviceTensor device = to_device(gathered);
  const DcpCase c{8, 1, 2048, false, Fill::kRandom, 3};
  for (bool sorted : {true, false}) {
    const HostTensor merged = gpu_merge(device.view, c, sorted);
    for (int64_t t = 0; t < 3; ++t) {
      EXPECT_EQ(topk_row(merged, t, c.k), std::vector<int32_t>(c.k, -1)) << "row " << t;
    }
    EXPECT_TRUE(ColumnsBeyondKUntouched(merged, c.k));
  }
}

// Not a valid DCP input (ids repeat), but it drives the radix select through all 8 digits and
// its take-part-of-the-boundary path: keys that differ only in their lowest bits, and exact
// duplicates straddling the k-th place. The CPU merge is the oracle (the k largest of the
// multiset, sorted, is unique).
TEST(DcpCuda, DuplicateAndNearlyEqualCandidatesMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int k : {1, 7, 512, 2048}) {
    for (int ranks : {2, 5, 8}) {
      const DcpCase c{ranks, 1, k, false, Fill::kRandom, 4};
      HostTensor gathered(DType::kI64, {c.rows, static_cast<int64_t>(ranks) * k});
      for (int64_t t = 0; t < c.rows; ++t) {
        for (int64_t s = 0; s < static_cast<int64_t>(ranks) * k; ++s) {
          uint64_t key;
          switch (t) {
            case 0:  // few distinct keys
              key = 0x8000000000000000ull + static_cast<uint64_t>(rng.uniform_int(0, 5));
              break;
            case 1:  // one high half, the low 8 bits differ, some empty slots
              key = rng.bernoulli(0.1)
                        ? 0
                        : 0xC0000000FFFFFF00ull + static_cast<uint64_t>(rng.uniform_int(0, 255));
              break;
            case 2:  // a NaN score (bits 0) with small ids, and empty slots
              key = rng.bernoulli(0.5) ? 0 : ~static_cast<uint32_t>(rng.uniform_int(0, 3));
              break;
            default:
              key = static_cast<uint64_t>(rng.uniform_int(1, INT64_MAX));
          }
          gathered.at<uint64_t>({t, s}) = key;
        }
      }
      SCOPED_TRACE(describe(c));
      const HostTensor expected = cpu_merge(gathered.view(), c, c.k + 3, true);
      const DeviceTensor device = to_device(gathered);
      const HostTensor merged = gpu_merge(device.view, c, true);
      EXPECT_EQ(bytes_of(merged), bytes_of(expected));
    }
  }
}

// Values the host cannot check without a sync are made safe on the device: an index past the
// row, a negative one other than -1, a row start past the width (clamped), a global id beyond
// int32. All pack as empty slots; the CPU rejects the same inputs.
TEST(DcpCuda, PackTurnsUncheckedBadIndicesIntoEmptySlots) {
  SKIP_WITHOUT_GPU();
  const DcpGroup group{2, 1};
  HostTensor logits(DType::kF32, {3, 10});
  logits.fill<float>(1.0f);
  HostTensor local_topk(DType::kI32, {3, 4});
  const int32_t indices[3][4] = {{0, 9, 10, -7}, {0, 2, 3, -1}, {0, INT32_MAX, 5, 1}};
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < 4; ++i) local_topk.at<int32_t>({t, i}) = indices[t][i];
  }
  HostTensor row_starts = i32_tensor({0, 100, -4});  // row 1 clamped to 10, row 2 to 0
  const DeviceTensor logits_device = to_device(logits);
  const DeviceTensor topk_device = to_device(local_topk);
  const DeviceTensor starts_device = to_device(row_starts);
  HostTensor packed = poisoned_candidates(3, 4);
  DeviceTensor packed_device = to_device(packed);
  FI_ASSERT_OK(dcp_pack_candidates(packed_device.view, logits_device.view, topk_device.view,
                                   starts_device.view, 4, 1, group));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(packed, packed_device);
  const uint64_t one = uint64_t{0xBF800000u} << 32;  // ordered bits of 1.0f
  auto key = [&](uint32_t global_id) { return one | static_cast<uint32_t>(~global_id); };
  // Rank 1 of 2: local l -> global 2 l + 1.
  EXPECT_EQ(packed.at<uint64_t>({0, 0}), key(1));
  EXPECT_EQ(packed.at<uint64_t>({0, 1}), key(19));
  EXPECT_EQ(packed.at<uint64_t>({0, 2}), 0u);  // column 10 is past the row
  EXPECT_EQ(packed.at<uint64_t>({0, 3}), 0u);  // negative
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(packed.at<uint64_t>({1, i}), 0u) << i;
  EXPECT_EQ(packed.at<uint64_t>({2, 0}), key(1));
  EXPECT_EQ(packed.at<uint64_t>({2, 1}), 0u);  // past the row, and its id overflows int32
  EXPECT_EQ(packed.at<uint64_t>({2, 2}), key(11));
  EXPECT_EQ(packed.at<uint64_t>({2, 3}), key(3));
}

TEST(DcpCuda, BFloat16LogitsPackTheSameKeysAsTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 5, width = 300;
  const int k = 64;
  HostTensor logits(DType::kBF16, {rows, width});
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t s = 0; s < width; ++s) {
      logits.at<uint16_t>({t, s}) =
          static_cast<uint16_t>(float_bits(random_logit(rng, Fill::kSpecial)) >> 16);
    }
  }
  HostTensor lengths(DType::kI32, {rows});
  for (int64_t t = 0; t < rows; ++t)
    lengths.data<int32_t>()[t] = static_cast<int32_t>(width - 7 * t);
  HostTensor local_topk = poisoned_topk_output(rows, k);
  FI_ASSERT_OK(
      topk_per_row(local_topk.view(), logits.view(), RowRanges::decode(lengths.view()), k));
  const DcpGroup group{3, 2};
  HostTensor expected(DType::kI64, {rows, k});
  FI_ASSERT_OK(dcp_pack_candidates(expected.view(), logits.view(), local_topk.view(), TensorView{},
                                   k, 2, group));
  const DeviceTensor logits_device = to_device(logits);
  const DeviceTensor topk_device = to_device(local_topk);
  HostTensor packed = poisoned_candidates(rows, k);
  DeviceTensor packed_device = to_device(packed);
  FI_ASSERT_OK(dcp_pack_candidates(packed_device.view, logits_device.view, topk_device.view,
                                   TensorView{}, k, 2, group));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(packed, packed_device);
  EXPECT_EQ(bytes_of(packed), bytes_of(expected));
}

TEST(DcpCuda, RepeatRunsAreBitIdentical) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const DcpCase c{8, 2, 2048, true, Fill::kFewTies, 6};
  const DcpSimulation sim = simulate_dcp(rng, c);
  const DeviceDcp device(sim, c);
  std::vector<uint8_t> first;
  for (int repeat = 0; repeat < kRepeats; ++repeat) {
    HostTensor merged = poisoned_topk_output(c.rows, c.k + 1);
    DeviceTensor out = to_device(merged);
    FI_ASSERT_OK(device.pack_and_merge(c, out.view, true));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(merged, out);
    if (repeat == 0) {
      first = bytes_of(merged);
      EXPECT_TRUE(SameTopK(merged, sim.expected, c.k, true));
    }
    ASSERT_EQ(bytes_of(merged), first) << "repeat " << repeat;
  }
}

// Captured once (every rank's pack, then the merge), replayed: the same result each time.
TEST(DcpCuda, GraphCaptureReplaysTheSameResult) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const DcpCase c{4, 3, 512, true, Fill::kSpecial, 9};
  const DcpSimulation sim = simulate_dcp(rng, c);
  const DeviceDcp device(sim, c);
  HostTensor merged = poisoned_topk_output(c.rows, c.k + 2);
  DeviceTensor out = to_device(merged);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  const Status captured = device.pack_and_merge(c, out.view, true, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  FI_ASSERT_OK(captured);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 3; ++replay) {
    ASSERT_EQ(cudaMemcpyAsync(out.buffer.get(), merged.bytes(), merged.byte_size(),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);  // re-poison
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    HostTensor replayed = poisoned_topk_output(c.rows, c.k + 2);
    to_host(replayed, out);
    EXPECT_TRUE(SameTopK(replayed, sim.expected, c.k, true)) << "replay " << replay;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fitest
