// SPDX-License-Identifier: Apache-2.0
// The DCP ops' argument checks on CUDA tensors: they run everywhere (host buffers labelled
// CUDA are never dereferenced: every call fails before any launch).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "flashindexer/dist.h"
#include "support/compare.h"
#include "support/cuda.h"

namespace fitest {
namespace {

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

}  // namespace
}  // namespace fitest
