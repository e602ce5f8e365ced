// SPDX-License-Identifier: Apache-2.0
// Which CUDA devices run this build's kernels.
#pragma once

#include <string>

#include "flashindexer/status.h"

namespace flashindexer {

// The kernels use sm_90a features (wgmma, TMA, thread-block clusters, setmaxnreg), and sm_90a
// code runs on compute capability 9.0 alone: H100, H200, H20, GH200.
constexpr bool sm90a_runs_on(int major, int minor) { return major == 9 && minor == 0; }

// Why a device of compute capability major.minor cannot run the kernels, or "" when it can.
std::string arch_refusal(int device, const std::string& name, int major, int minor);

// For an op on CUDA tensors, before the backend's own checks: kUnsupported naming the op, the
// device and its compute capability when the current device is there and cannot run the
// kernels (every launch would fail with "no kernel image"); Ok otherwise, also without a device
// (the backend then reports that at its first CUDA call). In a build without the CUDA backend:
// not_on_cuda(op).
Status check_cuda_device(const char* op);

}  // namespace flashindexer
