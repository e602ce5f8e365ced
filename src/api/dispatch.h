// How a public op picks its backend: by the device of its tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "core/checks.h"
#include "cpu/cpu_ops.h"
#include "flashindexer/status.h"
#include "api/device.h"

namespace flashindexer {

// The answer of an op that has no CUDA implementation in this build.
inline Status not_on_cuda(const char* op) {
  return Status::Unsupported(
      concat(op, ": CUDA tensors are not supported by this build (the CUDA backend of this op "
                 "is not available yet); pass CPU tensors"));
}

inline int cpu_threads(const RunOptions& options) { return cpu::resolve_threads(options.cpu_threads); }

// Runs `body(workspace)` with the caller's workspace (RunOptions::workspace) when one is given,
// else with one allocated for this call; `needed` bytes are required.
template <typename Body>
Status with_cpu_workspace(const char* op, size_t needed, const RunOptions& options, Body body) {
  if (options.workspace == nullptr) {
    std::vector<uint64_t> owned((needed + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    body(static_cast<void*>(owned.data()));
    return Status::Ok();
  }
  if (options.workspace_bytes < needed) {
    return Status::WorkspaceTooSmall(concat(op, ": workspace has ", options.workspace_bytes,
                                            " bytes, expected at least ", needed));
  }
  body(options.workspace);
  return Status::Ok();
}

}  // namespace flashindexer
