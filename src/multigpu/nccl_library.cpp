// SPDX-License-Identifier: Apache-2.0
// Loads libnccl.so.2 once: first by its soname (the copy already in the process, or the one the
// loader finds), then from the path CMake found at build time.
#ifdef FLASHINDEXER_WITH_NCCL

#include "multigpu/nccl_library.h"

#include <dlfcn.h>

namespace flashindexer::multigpu {
namespace {

struct LoadResult {
  NcclLibrary library{};
  bool loaded = false;
  std::string error;
};

template <typename Function>
bool resolve(void* handle, const char* name, Function* function, std::string* error) {
  *function = reinterpret_cast<Function>(dlsym(handle, name));
  if (*function == nullptr && error->empty()) error->assign(std::string("missing symbol ") + name);
  return *function != nullptr;
}

LoadResult load() {
  LoadResult result;
  void* handle = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
#ifdef FLASHINDEXER_NCCL_LIBRARY_PATH
  if (handle == nullptr) handle = dlopen(FLASHINDEXER_NCCL_LIBRARY_PATH, RTLD_NOW | RTLD_LOCAL);
#endif
  if (handle == nullptr) {
    const char* reason = dlerror();
    result.error = std::string("cannot load libnccl.so.2: ") + (reason ? reason : "unknown error");
    return result;
  }
  NcclLibrary& l = result.library;
  std::string& e = result.error;
  // The handle stays open for the life of the process: communicators may outlive any caller.
  bool ok = resolve(handle, "ncclGetVersion", &l.get_version, &e);
  ok &= resolve(handle, "ncclGetErrorString", &l.error_string, &e);
  ok &= resolve(handle, "ncclGetUniqueId", &l.get_unique_id, &e);
  ok &= resolve(handle, "ncclCommInitRank", &l.comm_init_rank, &e);
  ok &= resolve(handle, "ncclCommDestroy", &l.comm_destroy, &e);
  ok &= resolve(handle, "ncclCommCount", &l.comm_count, &e);
  ok &= resolve(handle, "ncclCommUserRank", &l.comm_user_rank, &e);
  ok &= resolve(handle, "ncclAllGather", &l.all_gather, &e);
  ok &= resolve(handle, "ncclBroadcast", &l.broadcast, &e);
  ok &= resolve(handle, "ncclGroupStart", &l.group_start, &e);
  ok &= resolve(handle, "ncclGroupEnd", &l.group_end, &e);
  result.loaded = ok;
  if (ok) e.clear();
  return result;
}

const LoadResult& loaded() {
  static const LoadResult result = load();
  return result;
}

}  // namespace

const NcclLibrary* nccl_library() { return loaded().loaded ? &loaded().library : nullptr; }

const std::string& nccl_load_error() { return loaded().error; }

}  // namespace flashindexer::multigpu

#endif  // FLASHINDEXER_WITH_NCCL
