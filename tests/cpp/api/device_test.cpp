// SPDX-License-Identifier: Apache-2.0
// Which CUDA devices the build's kernels run on: decided from the compute capability, refused
// with a reason that names the device (built with or without the CUDA backend, GPU or not).
#include "api/device.h"

#include <gtest/gtest.h>

#include <string>

#include "flashindexer/flashindexer.h"

namespace fitest {
namespace {

using flashindexer::arch_refusal;
using flashindexer::sm90a_runs_on;

TEST(CudaDevice, OnlyComputeCapability90RunsTheKernels) {
  EXPECT_TRUE(sm90a_runs_on(9, 0));
  for (const auto& [major, minor] :
       {std::pair{7, 0}, std::pair{8, 0}, std::pair{8, 6}, std::pair{8, 9}, std::pair{9, 1},
        std::pair{10, 0}, std::pair{12, 0}}) {
    SCOPED_TRACE(::testing::Message() << major << "." << minor);
    EXPECT_FALSE(sm90a_runs_on(major, minor));
  }
}

TEST(CudaDevice, TheRefusalNamesTheDeviceAndWhatTheKernelsNeed) {
  EXPECT_EQ(arch_refusal(0, "NVIDIA H200", 9, 0), "");
  const std::string refusal = arch_refusal(1, "NVIDIA A100-SXM4-80GB", 8, 0);
  EXPECT_NE(refusal.find("CUDA device 1 (NVIDIA A100-SXM4-80GB) has compute capability 8.0"),
            std::string::npos)
      << refusal;
  EXPECT_NE(refusal.find("sm_90a"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("compute capability 9.0 only"), std::string::npos) << refusal;
}

TEST(CudaDevice, ADeviceThatIsNotThereDoesNotRunTheKernels) {
  std::string reason;
  EXPECT_FALSE(flashindexer::cuda_device_runs_kernels(1000, &reason));
  EXPECT_FALSE(reason.empty());
  EXPECT_FALSE(flashindexer::cuda_device_runs_kernels(-1));
}

}  // namespace
}  // namespace fitest
