// How a public op picks its backend: by the device of its tensors.
#pragma once

#include "core/checks.h"
#include "cpu/cpu_ops.h"
#include "flashindexer/status.h"

namespace flashindexer {

// The answer of an op that has no CUDA implementation in this build.
inline Status not_on_cuda(const char* op) {
  return Status::Unsupported(
      concat(op, ": CUDA tensors are not supported by this build (the CUDA backend of this op "
                 "is not available yet); pass CPU tensors"));
}

inline int cpu_threads(const RunOptions& options) { return cpu::resolve_threads(options.cpu_threads); }

}  // namespace flashindexer
