// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <string>

namespace flashindexer {

inline constexpr const char* kVersion = "0.1.0";

// What this build contains.
struct BuildInfo {
  bool cuda = false;            // CUDA backend compiled in
  const char* cuda_archs = "";  // e.g. "sm_90a"
  const char* compiler = "";
};
BuildInfo build_info();

// CUDA devices visible at run time (0 when built without CUDA or none is present).
int cuda_device_count();

// Whether this build's CUDA kernels run on CUDA device `device`. They are built for sm_90a
// (wgmma, TMA, clusters), so they run on compute capability 9.0 only: H100, H200, H20, GH200.
// When they do not, `reason` (if given) says why: no CUDA backend, no such device, or the
// device's architecture. On such a device the CUDA ops return StatusCode::kUnsupported.
bool cuda_device_runs_kernels(int device, std::string* reason = nullptr);

}  // namespace flashindexer
