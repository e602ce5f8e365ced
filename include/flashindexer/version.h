#pragma once

namespace flashindexer {

inline constexpr const char* kVersion = "0.1.0";

// What this build contains.
struct BuildInfo {
  bool cuda = false;              // CUDA backend compiled in
  const char* cuda_archs = "";    // e.g. "sm_90a"
  const char* compiler = "";
};
BuildInfo build_info();

// CUDA devices visible at run time (0 when built without CUDA or none is present).
int cuda_device_count();

}  // namespace flashindexer
