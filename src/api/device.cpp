// Which CUDA devices run this build's kernels.
#include "api/device.h"

#include <atomic>
#include <optional>

#include "core/checks.h"
#include "flashindexer/version.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer {

std::string arch_refusal(int device, const std::string& name, int major, int minor) {
  if (sm90a_runs_on(major, minor)) return "";
  return concat("CUDA device ", device, " (", name, ") has compute capability ", major, ".", minor,
                "; this build's CUDA kernels (sm_90a) run on compute capability 9.0 only "
                "(H100, H200, H20, GH200)");
}

#ifdef FLASHINDEXER_WITH_CUDA
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
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  if (sm90a_runs_on(major, minor)) {
    if (cached) runs_kernels[device].store(true, std::memory_order_relaxed);
    return std::string();
  }
  cudaDeviceProp properties{};
  const bool named = cudaGetDeviceProperties(&properties, device) == cudaSuccess;
  if (!named) cudaGetLastError();
  return arch_refusal(device, named ? properties.name : "unnamed", major, minor);
}

}  // namespace
#endif

int cuda_device_count() {
#ifdef FLASHINDEXER_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: clear the sticky error, report none
    return 0;
  }
  return count;
#else
  return 0;
#endif
}

bool cuda_device_runs_kernels(int device, std::string* reason) {
#ifdef FLASHINDEXER_WITH_CUDA
  const int count = cuda_device_count();
  std::optional<std::string> refusal;
  if (count == 0) {
    refusal = "no CUDA device is visible";
  } else if (device < 0 || device >= count) {
    refusal = concat("CUDA device ", device, " is not visible (", count, " visible)");
  } else {
    refusal = refusal_of(device);
    if (!refusal) refusal = concat("CUDA device ", device, " cannot be queried");
  }
  if (reason != nullptr) *reason = *refusal;
  return refusal->empty();
#else
  if (reason != nullptr) *reason = "this build has no CUDA backend";
  (void)device;
  return false;
#endif
}

Status check_cuda_device(const char* op) {
#ifdef FLASHINDEXER_WITH_CUDA
  // Without a current device the backend's own argument checks still run and its first CUDA
  // call reports the missing device: only a device that is there and cannot run the kernels is
  // refused here.
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return Status::Ok();
  }
  const std::optional<std::string> refusal = refusal_of(device);
  if (!refusal || refusal->empty()) return Status::Ok();
  return Status::Unsupported(concat(op, ": ", *refusal, "; pass CPU tensors"));
#else
  return Status::Unsupported(concat(op, ": this build has no CUDA backend; pass CPU tensors"));
#endif
}

}  // namespace flashindexer
