// SPDX-License-Identifier: Apache-2.0
#include "flashindexer/version.h"

#include "cuda/device_query.h"

namespace flashindexer {

BuildInfo build_info() {
  BuildInfo info;
  info.compiler = FLASHINDEXER_COMPILER;
  info.cuda = cuda::backend_built();
  info.cuda_archs = cuda::built_archs();
  return info;
}

}  // namespace flashindexer
