#include "flashindexer/version.h"

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

}  // namespace flashindexer
