// Which CUDA devices run this build's kernels, asked once per device.
#include "ops/cuda_device.h"

#include <atomic>

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
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached && runs_kernels[device].load(std::memory_order_relaxed)) return true;
  const int count = cuda_device_count();
  if (device < 0 || device >= count) {
    if (reason != nullptr) {
      *reason = count == 0
                    ? std::string("no CUDA device is visible")
                    : concat("CUDA device ", device, " is not visible (", count, " visible)");
    }
    return false;
  }
  cudaDeviceProp properties{};
  if (const cudaError_t error = cudaGetDeviceProperties(&properties, device);
      error != cudaSuccess) {
    cudaGetLastError();
    if (reason != nullptr) {
      *reason =
          concat("CUDA device ", device, " cannot be queried (", cudaGetErrorString(error), ")");
    }
    return false;
  }
  const std::string refusal =
      arch_refusal(device, properties.name, properties.major, properties.minor);
  if (cached && refusal.empty()) runs_kernels[device].store(true, std::memory_order_relaxed);
  if (reason != nullptr) *reason = refusal;
  return refusal.empty();
#else
  if (reason != nullptr) *reason = "this build has no CUDA backend";
  (void)device;
  return false;
#endif
}

Status check_cuda_device(const char* op) {
#ifdef FLASHINDEXER_WITH_CUDA
  int device = 0;
  if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
    cudaGetLastError();
    return Status::DeviceError(
        concat(op, ": no current CUDA device (", cudaGetErrorString(error), ")"));
  }
  std::string reason;
  if (cuda_device_runs_kernels(device, &reason)) return Status::Ok();
  return Status::Unsupported(concat(op, ": ", reason, "; pass CPU tensors"));
#else
  return Status::Unsupported(concat(op, ": this build has no CUDA backend; pass CPU tensors"));
#endif
}

}  // namespace flashindexer
