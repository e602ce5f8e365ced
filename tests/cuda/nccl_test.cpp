// SPDX-License-Identifier: Apache-2.0
// The NCCL transport (nccl.h): without NCCL every entry point is unsupported; with NCCL a
// one-rank communicator runs dcp_topk_allgather and tp_allgather_rows. Argument-error tests run
// everywhere; the rest skip without a GPU.
#include "flashindexer/nccl.h"

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
