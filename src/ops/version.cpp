#include "flashindexer/version.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer {

BuildInfo build_info() {
  BuildInfo info;
  info.compiler = FLASHINDEXER_COMPILER;
#ifdef FLASHINDEXER_WITH_CUDA
  info.cuda = true;
  info.cuda_archs = FLASHINDEXER_CUDA_ARCHS;
#endif
  return info;
}

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

}  // namespace flashindexer
