// SPDX-License-Identifier: Apache-2.0
// The NCCL transport of the multi-GPU building blocks (dist.h): the DCP top-k all-gather and the
// TP row all-gather, each one call on the caller's stream.
//
// This header never includes <nccl.h>: a communicator crosses it as an opaque pointer (an
// ncclComm_t), so it compiles in any build. The library is built with NCCL support when CMake
// finds the NCCL headers (FLASHINDEXER_NCCL, cmake/nccl.cmake), and loads libnccl.so.2 at the
// first use, so a binary runs (and reports kUnsupported) on machines without NCCL; an engine
// that already loaded NCCL (PyTorch) shares its library, so its communicators can be wrapped.
// Without NCCL support every function here returns kUnsupported and has_nccl() is false.
#pragma once

#include <array>
#include <cstdint>

#include "flashindexer/dist.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

// True when this build has NCCL support and libnccl.so.2 can be loaded.
bool has_nccl();

// The loaded NCCL's version code (e.g. 22703 for 2.27.3), or 0 without NCCL.
int nccl_version();

// An ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128 bytes), to be sent from one rank to all others.
struct NcclUniqueId {
  std::array<char, 128> bytes{};
};

// A new unique id for NcclCommunicator::create (call on one rank, broadcast it out of band).
Status nccl_unique_id(NcclUniqueId* id);

// An NCCL communicator: either the caller's (wrapped, never destroyed here) or one created from a
// unique id (owned: destroyed with the object). Move-only; a default-constructed one is empty.
class NcclCommunicator {
 public:
  NcclCommunicator() = default;
  ~NcclCommunicator();
  NcclCommunicator(NcclCommunicator&& other) noexcept;
  NcclCommunicator& operator=(NcclCommunicator&& other) noexcept;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Wraps the caller's ncclComm_t (not owned); its rank and size are queried from NCCL.
  static Status wrap(NcclCommunicator* communicator, void* nccl_comm);
  // Creates a communicator of `world_size` ranks on the current CUDA device (owned). Collective:
  // every rank calls it with the same id and its own rank, and it returns once all have joined.
  static Status create(NcclCommunicator* communicator, const NcclUniqueId& id, int rank,
                       int world_size);

  bool empty() const { return comm_ == nullptr; }
  void* handle() const { return comm_; }  // the ncclComm_t
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool owned() const { return owned_; }

 private:
  NcclCommunicator(void* comm, int rank, int size, bool owned)
      : comm_(comm), rank_(rank), size_(size), owned_(owned) {}
  void reset();
  void* comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  bool owned_ = false;
};

// DCP: the global top-k of every row from each rank's local top-k, identical on every rank.
// Packs this rank's candidates (dcp_pack_candidates, rank = comm.rank()), all-gathers them
// (ncclAllGather of [rows, k] i64 blocks into an [N, rows, k] buffer) and merges them on the
// device (dcp_merge_topk on the [rows, N, k] view), all on options.cuda_stream.
//   out:        [rows, >= k] i32 (out), CUDA: global ids, sorted best first, -1 padded. May be
//               local_topk itself (the candidates are packed before the merge writes).
//   logits:     [rows, width] f32 or bf16, CUDA: this rank's local logits.
//   local_topk: [rows, >= k] i32, CUDA: this rank's local top-k (topk_per_row on its shard).
//   row_starts: [rows] i32, CUDA: the local ks of each row (prefill), or undefined (decode).
//   group:      group.ranks must equal comm.size(); group.interleave is the KV interleave I.
//   options.workspace: CUDA, dcp_topk_allgather_workspace_size(rows, k, ranks) bytes, 16-byte
//               aligned (the gathered candidates); nothing is allocated.
// Every rank must call it with the same rows and k (a collective). Graph-capturable when the
// NCCL version supports capture (2.9 and later).
Status dcp_topk_allgather(const TensorView& out, const TensorView& logits,
                          const TensorView& local_topk, const TensorView& row_starts, int k,
                          const DcpGroup& group, const NcclCommunicator& comm,
                          const RunOptions& options = {});

size_t dcp_topk_allgather_workspace_size(int64_t rows, int k, int ranks);

// TP row sharding: every rank ends with every rank's finished rows. Rank j owns the rows
// [first_row + sum(sizes[:j]), + sizes[j]) of `buffer` (a tp_row_shard_plan result) and has
// written them; one grouped call (an ncclBroadcast per rank) copies each rank's rows to all
// others, on options.cuda_stream. Rows outside the shared window are not touched.
//   buffer: [total_rows, width] i32, CUDA, row stride >= width. A window of n rows is sent as
//           one contiguous range of (n - 1) * row_stride + width elements, so the padding
//           between its rows travels with it.
//   sizes:  [tp] i32, CPU; tp must equal comm.size(); first_row + sum(sizes) <= total_rows.
// Every rank must call it with the same sizes and first_row (a collective).
Status tp_allgather_rows(const TensorView& buffer, const TensorView& sizes, int64_t first_row,
                         const NcclCommunicator& comm, const RunOptions& options = {});

}  // namespace flashindexer
