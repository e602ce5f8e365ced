// SPDX-License-Identifier: Apache-2.0
// How a public op picks its backend: by the device of its tensors. An op on CUDA tensors asks
// check_cuda_device first, then calls its cuda:: entry (src/cuda/cuda_ops.h); a build without
// CUDA links src/cuda/stub.cpp, whose entries answer kUnsupported, so nothing here depends on
// how the library was configured.
#pragma once

#include <cstdint>
#include <vector>

#include "api/device.h"
#include "core/checks.h"
#include "cpu/cpu_ops.h"
#include "flashindexer/status.h"

namespace flashindexer {

inline int cpu_threads(const RunOptions& options) {
  return cpu::resolve_threads(options.cpu_threads);
}

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
