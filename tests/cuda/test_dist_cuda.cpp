// DCP pack and merge on CUDA tensors with simulated ranks: CUDA pack == CPU pack bit for bit,
// CUDA pack + merge == CPU merge == topk_per_row over the concatenated rows (same ids, same
// order), for both gathered layouts; ties across ranks, NaN and infinities, empty ranks and rows,
// duplicate candidates, device-side clamping of unchecked values, poisoned outputs, bit-identical
// repeats and graph capture. With NCCL: a one-rank communicator runs dcp_topk_allgather and
// tp_allgather_rows. Kernel tests skip without a GPU; argument-error tests run everywhere (host
// buffers labelled CUDA are never dereferenced).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_test_support.h"
#include "dcp_simulation.h"
#include "flashindexer/dist.h"
#include "flashindexer/nccl.h"
#include "test_inputs.h"

namespace fitest {
namespace {

constexpr int kRepeats = 10;
constexpr uint64_t kPoisonKey = 0xA5A5A5A5A5A5A5A5ull;

std::vector<uint8_t> bytes_of(const HostTensor& t) {
  return std::vector<uint8_t>(t.bytes(), t.bytes() + t.byte_size());
}

HostTensor poisoned_candidates(int64_t rows, int64_t cols) {
  HostTensor t(DType::kI64, {rows, cols});
  t.fill<uint64_t>(kPoisonKey);
  return t;
}

// The CPU merge of `gathered`: what every CUDA merge with the same order must reproduce bit for
// bit.
HostTensor cpu_merge(const TensorView& gathered, const DcpCase& c, int64_t out_cols, bool sorted) {
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
HostTensor gpu_merge(const TensorView& gathered, const DcpCase& c, bool sorted) {
  HostTensor merged = poisoned_topk_output(c.rows, c.k + 3);
  DeviceTensor out = to_device(merged);
  const Status status = dcp_merge_topk(out.view, gathered, c.k, c.ranks, TopKOptions{sorted});
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(merged, out);
  return merged;
}

// The CUDA merge result against the CPU merge of the same order (bits) and the single-GPU top-k.
::testing::AssertionResult MergeMatches(const HostTensor& got, const HostTensor& cpu,
                                        const DcpSimulation& sim, const DcpCase& c, bool sorted) {
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

void check_case(Rng& rng, const DcpCase& c) {
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

// ---------------------------------------------------------------------------------------------
// Argument errors on CUDA tensors (no GPU needed: every call fails before any launch)

struct CudaDcpArgs {
  HostTensor candidates{DType::kI64, {2, 4}};
  HostTensor logits{DType::kF32, {2, 10}};
  HostTensor local_topk{DType::kI32, {2, 4}};
  HostTensor gathered{DType::kI64, {2, 8}};
  HostTensor merged{DType::kI32, {2, 4}};
  Status pack(int k = 4) const {
    return dcp_pack_candidates(labelled_cuda(candidates.view()), labelled_cuda(logits.view()),
                               labelled_cuda(local_topk.view()), TensorView{}, k, 1, {2, 1});
  }
  Status merge(const TensorView& out, int k = 4) const {
    return dcp_merge_topk(out, labelled_cuda(gathered.view()), k, 2);
  }
};

TEST(DcpCudaArgs, RejectsAHostOutputForDeviceCandidates) {
  CudaDcpArgs a;
  EXPECT_TRUE(IsRejected(a.merge(a.merged.view()), StatusCode::kInvalidArgument,
                         {"dcp_merge_topk", "out"}));
  EXPECT_TRUE(IsRejected(
      dcp_pack_candidates(a.candidates.view(), labelled_cuda(a.logits.view()),
                          labelled_cuda(a.local_topk.view()), TensorView{}, 4, 1, {2, 1}),
      StatusCode::kInvalidArgument, {"dcp_pack_candidates", "candidates"}));
}

TEST(DcpCudaArgs, ChecksShapesAndKOnDeviceTensors) {
  CudaDcpArgs a;
  EXPECT_TRUE(IsRejected(a.pack(2049), StatusCode::kInvalidArgument, {"k=2049"}));
  EXPECT_TRUE(IsRejected(a.merge(labelled_cuda(a.merged.view()), 0), StatusCode::kInvalidArgument,
                         {"k=0"}));
  a.merged = HostTensor(DType::kI32, {3, 4});
  EXPECT_TRUE(
      IsRejected(a.merge(labelled_cuda(a.merged.view())), StatusCode::kInvalidArgument, {"out"}));
  a.gathered = HostTensor(DType::kI64, {2, 7});
  EXPECT_TRUE(IsRejected(a.merge(labelled_cuda(a.merged.view())), StatusCode::kInvalidArgument,
                         {"gathered"}));
  CudaDcpArgs b;
  b.candidates = HostTensor(DType::kI64, {2, 3});
  EXPECT_TRUE(IsRejected(b.pack(), StatusCode::kInvalidArgument, {"candidates"}));
}

// ---------------------------------------------------------------------------------------------
// NCCL transport

TEST(NcclBuild, WithoutNcclEveryEntryPointIsUnsupported) {
  if (has_nccl()) GTEST_SKIP() << "NCCL " << nccl_version() << " is available";
  EXPECT_EQ(nccl_version(), 0);
  NcclUniqueId id;
  EXPECT_TRUE(IsRejected(nccl_unique_id(&id), StatusCode::kUnsupported, {"NCCL"}));
  NcclCommunicator comm;
  EXPECT_TRUE(
      IsRejected(NcclCommunicator::create(&comm, id, 0, 1), StatusCode::kUnsupported, {"NCCL"}));
  HostTensor sizes = i32_tensor({1});
  HostTensor buffer(DType::kI32, {1, 4});
  EXPECT_TRUE(IsRejected(tp_allgather_rows(labelled_cuda(buffer.view()), sizes.view(), 0, comm),
                         StatusCode::kUnsupported, {"tp_allgather_rows"}));
}

TEST(NcclArgs, RejectsAMissingCommunicator) {
  if (!has_nccl()) GTEST_SKIP() << "built without NCCL or libnccl.so.2 not loadable";
  const NcclCommunicator empty;
  HostTensor logits(DType::kF32, {2, 10});
  HostTensor local_topk(DType::kI32, {2, 4});
  HostTensor out(DType::kI32, {2, 4});
  EXPECT_TRUE(IsRejected(
      dcp_topk_allgather(labelled_cuda(out.view()), labelled_cuda(logits.view()),
                         labelled_cuda(local_topk.view()), TensorView{}, 4, {2, 1}, empty),
      StatusCode::kInvalidArgument, {"dcp_topk_allgather", "comm is empty"}));
  HostTensor sizes = i32_tensor({1, 1});
  HostTensor buffer(DType::kI32, {2, 4});
  EXPECT_TRUE(IsRejected(tp_allgather_rows(labelled_cuda(buffer.view()), sizes.view(), 0, empty),
                         StatusCode::kInvalidArgument, {"tp_allgather_rows", "comm is empty"}));
  NcclCommunicator wrapped;
  EXPECT_TRUE(IsRejected(NcclCommunicator::wrap(&wrapped, nullptr), StatusCode::kInvalidArgument,
                         {"nccl_comm"}));
  NcclUniqueId id;
  EXPECT_TRUE(IsRejected(NcclCommunicator::create(&wrapped, id, 2, 2), StatusCode::kInvalidArgument,
                         {"rank=2"}));
}

// A world of one rank on the current GPU.
Status one_rank_communicator(NcclCommunicator* comm) {
  NcclUniqueId id;
  if (Status status = nccl_unique_id(&id); !status.ok()) return status;
  return NcclCommunicator::create(comm, id, 0, 1);
}

TEST(NcclCuda, RejectsAMismatchedCommunicatorAndHostTensors) {
  SKIP_WITHOUT_GPU();
  if (!has_nccl()) GTEST_SKIP() << "built without NCCL or libnccl.so.2 not loadable";
  NcclCommunicator comm;
  FI_ASSERT_OK(one_rank_communicator(&comm));
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_TRUE(comm.owned());
  HostTensor logits(DType::kF32, {2, 10});
  HostTensor local_topk(DType::kI32, {2, 4});
  HostTensor out(DType::kI32, {2, 4});
  EXPECT_TRUE(IsRejected(
      dcp_topk_allgather(labelled_cuda(out.view()), labelled_cuda(logits.view()),
                         labelled_cuda(local_topk.view()), TensorView{}, 4, {2, 1}, comm),
      StatusCode::kInvalidArgument, {"comm has 1 ranks", "group.ranks=2"}));
  EXPECT_TRUE(IsRejected(
      dcp_topk_allgather(labelled_cuda(out.view()), logits.view(), labelled_cuda(local_topk.view()),
                         TensorView{}, 4, {1, 1}, comm),
      StatusCode::kInvalidArgument, {"logits", "cuda"}));
  EXPECT_TRUE(IsRejected(
      dcp_topk_allgather(labelled_cuda(out.view()), labelled_cuda(logits.view()),
                         labelled_cuda(local_topk.view()), TensorView{}, 4, {1, 1}, comm),
      StatusCode::kWorkspaceTooSmall, {"workspace"}));
  HostTensor sizes = i32_tensor({1, 1});
  HostTensor buffer(DType::kI32, {2, 4});
  EXPECT_TRUE(IsRejected(tp_allgather_rows(labelled_cuda(buffer.view()), sizes.view(), 0, comm),
                         StatusCode::kInvalidArgument, {"comm has 1 ranks", "sizes"}));
  HostTensor one = i32_tensor({3});
  EXPECT_TRUE(IsRejected(tp_allgather_rows(buffer.view(), one.view(), 0, comm),
                         StatusCode::kInvalidArgument, {"buffer", "cuda"}));
  EXPECT_TRUE(IsRejected(tp_allgather_rows(labelled_cuda(buffer.view()), one.view(), 0, comm),
                         StatusCode::kInvalidArgument, {"exceeds"}));
}

TEST(NcclCuda, OneRankDcpTopKAllGatherEqualsTheLocalTopK) {
  SKIP_WITHOUT_GPU();
  if (!has_nccl()) GTEST_SKIP() << "built without NCCL or libnccl.so.2 not loadable";
  FI_SEEDED_RNG(rng);
  NcclCommunicator owned;
  FI_ASSERT_OK(one_rank_communicator(&owned));
  // The same communicator wrapped (not owned): both must work, and only `owned` destroys it.
  NcclCommunicator wrapped;
  FI_ASSERT_OK(NcclCommunicator::wrap(&wrapped, owned.handle()));
  EXPECT_FALSE(wrapped.owned());
  EXPECT_EQ(wrapped.size(), 1);
  for (const NcclCommunicator* comm : {&owned, &wrapped}) {
    for (int k : {1, 512, 2048}) {
      for (bool prefill : {false, true}) {
        const DcpCase c{1, 1, k, prefill, Fill::kSpecial, 5};
        SCOPED_TRACE(describe(c));
        const DcpSimulation sim = simulate_dcp(rng, c);
        const DeviceDcp device(sim, c);
        DeviceBuffer workspace(dcp_topk_allgather_workspace_size(c.rows, c.k, 1));
        RunOptions options;
        options.workspace = workspace.get();
        options.workspace_bytes = workspace.bytes();
        HostTensor merged = poisoned_topk_output(c.rows, c.k + 2);
        DeviceTensor out = to_device(merged);
        FI_ASSERT_OK(dcp_topk_allgather(out.view, device.logits[0].view, device.local_topk[0].view,
                                        device.row_starts[0].view, c.k, {1, 1}, *comm, options));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(merged, out);
        EXPECT_TRUE(SameTopK(merged, sim.expected, c.k, true));
      }
    }
  }
}

TEST(NcclCuda, OneRankTpAllGatherRowsKeepsTheWindowAndTouchesNothingElse) {
  SKIP_WITHOUT_GPU();
  if (!has_nccl()) GTEST_SKIP() << "built without NCCL or libnccl.so.2 not loadable";
  NcclCommunicator comm;
  FI_ASSERT_OK(one_rank_communicator(&comm));
  // 10 rows of width 6, row stride 8: rows [3, 8) are the rank's window.
  HostTensor buffer = poisoned_topk_output(10, 6, 8);
  for (int64_t r = 3; r < 8; ++r) {
    for (int64_t c = 0; c < 6; ++c) buffer.at<int32_t>({r, c}) = static_cast<int32_t>(100 * r + c);
  }
  const std::vector<uint8_t> before = bytes_of(buffer);
  DeviceTensor device = to_device(buffer);
  HostTensor sizes = i32_tensor({5});
  FI_ASSERT_OK(tp_allgather_rows(device.view, sizes.view(), 3, comm));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(buffer, device);
  EXPECT_EQ(bytes_of(buffer), before);
}

}  // namespace
}  // namespace fitest
