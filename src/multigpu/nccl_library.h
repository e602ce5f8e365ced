// SPDX-License-Identifier: Apache-2.0
// NCCL, loaded at run time (dlopen of libnccl.so.2): the library links no NCCL, so binaries run
// on machines without it, and a process that already loaded NCCL (PyTorch) shares that copy, so
// the communicators it created are valid here. Only compiled with FLASHINDEXER_WITH_NCCL.
#pragma once

#include <nccl.h>

#include <string>

namespace flashindexer::multigpu {

// The NCCL functions FlashIndexer calls, resolved once.
struct NcclLibrary {
  decltype(&ncclGetVersion) get_version;
  decltype(&ncclGetErrorString) error_string;
  decltype(&ncclGetUniqueId) get_unique_id;
  decltype(&ncclCommInitRank) comm_init_rank;
  decltype(&ncclCommDestroy) comm_destroy;
  decltype(&ncclCommCount) comm_count;
  decltype(&ncclCommUserRank) comm_user_rank;
  decltype(&ncclAllGather) all_gather;
  decltype(&ncclBroadcast) broadcast;
  decltype(&ncclGroupStart) group_start;
  decltype(&ncclGroupEnd) group_end;
};

// The loaded library, or nullptr when it cannot be loaded (then nccl_load_error() says why).
// Thread-safe; the first call loads.
const NcclLibrary* nccl_library();
const std::string& nccl_load_error();

}  // namespace flashindexer::multigpu
