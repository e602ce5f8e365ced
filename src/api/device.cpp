// SPDX-License-Identifier: Apache-2.0
// Which CUDA devices run this build's kernels.
#include "api/device.h"

#include <atomic>
#include <optional>

#include "core/checks.h"
#include "cuda/device_query.h"
#include "flashindexer/version.h"

namespace flashindexer {

std::string arch_refusal(int device, const std::string& name, int major, int minor) {
  if (sm90a_runs_on(major, minor)) return "";
  return concat("CUDA device ", device, " (", name, ") has compute capability ", major, ".", minor,
                "; this build's CUDA kernels (sm_90a) run on compute capability 9.0 only "
                "(H100, H200, H20, GH200)");
}

namespace {

// Devices found to run the kernels: ops ask before every launch, so a yes is kept (a no is
// asked again: it is the error path).
constexpr int kCachedDevices = 64;
std::atomic<bool> runs_kernels[kCachedDevices];

// arch_refusal of a device ("" when it runs the kernels), or nullopt when it cannot be queried.
// The compute capability comes from attribute queries (cheap, and fine inside a stream capture);
// the device's name, for the refusal only, from its properties.
std::optional<std::string> refusal_of(int device) {
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached && runs_kernels[device].load(std::memory_order_relaxed)) return std::string();
  int major = 0;
  int minor = 0;
  if (!cuda::compute_capability(device, &major, &minor)) return std::nullopt;
  if (sm90a_runs_on(major, minor)) {
    if (cached) runs_kernels[device].store(true, std::memory_order_relaxed);
    return std::string();
  }
  const std::string name = cuda::device_name(device);
  return arch_refusal(device, name.empty() ? "unnamed" : name, major, minor);
}

}  // namespace

int cuda_device_count() { return cuda::device_count(); }

bool cuda_device_runs_kernels(int device, std::string* reason) {
  std::optional<std::string> refusal;
  if (!cuda::backend_built()) {
    refusal = "this build has no CUDA backend";
  } else if (const int count = cuda_device_count(); count == 0) {
    refusal = "no CUDA device is visible";
  } else if (device < 0 || device >= count) {
    refusal = concat("CUDA device ", device, " is not visible (", count, " visible)");
  } else {
    refusal = refusal_of(device);
    if (!refusal) refusal = concat("CUDA device ", device, " cannot be queried");
  }
  if (reason != nullptr) *reason = *refusal;
  return refusal->empty();
}

Status check_cuda_device(const char* op) {
  if (!cuda::backend_built()) return not_on_cuda(op);
  // Without a current device the backend's own argument checks still run and its first CUDA
  // call reports the missing device: only a device that is there and cannot run the kernels is
  // refused here.
  const int device = cuda::current_device();
  if (device < 0) return Status::Ok();
  const std::optional<std::string> refusal = refusal_of(device);
  if (!refusal || refusal->empty()) return Status::Ok();
  return Status::Unsupported(concat(op, ": ", *refusal, "; pass CPU tensors"));
}

}  // namespace flashindexer
