// SPDX-License-Identifier: Apache-2.0
// The NCCL transport (flashindexer/nccl.h): communicator handling, the DCP top-k all-gather and
// the TP row all-gather. Without NCCL support (FLASHINDEXER_WITH_NCCL undefined) every entry
// point answers kUnsupported.
#include "flashindexer/nccl.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "api/checks/topk.h"
#include "core/access.h"
#include "core/checks.h"

#ifdef FLASHINDEXER_WITH_NCCL
#include "multigpu/nccl_library.h"
#endif

namespace flashindexer {
namespace {

#ifdef FLASHINDEXER_WITH_NCCL
// The loaded library, or why an op cannot run.
Status library_status(const char* op, const multigpu::NcclLibrary** library) {
  *library = multigpu::nccl_library();
  if (*library != nullptr) return Status::Ok();
  return Status::Unsupported(
      concat(op, ": NCCL is not available (", multigpu::nccl_load_error(), ")"));
}

Status nccl_status(const multigpu::NcclLibrary& library, ncclResult_t result, const char* op,
                   const char* call) {
  if (result == ncclSuccess) return Status::Ok();
  return Status::DeviceError(
      concat(op, ": ", call, " failed: ", library.error_string(result), " (", int(result), ")"));
}
#else
Status library_status(const char* op, const void** library) {
  *library = nullptr;
  return Status::Unsupported(concat(op,
                                    ": this build has no NCCL support (configure with "
                                    "FLASHINDEXER_NCCL=ON and the NCCL headers installed)"));
}
#endif

#ifdef FLASHINDEXER_WITH_NCCL
using Library = multigpu::NcclLibrary;
#else
using Library = void;
#endif

// The communicator exists and has `ranks` ranks.
void check_communicator(ArgCheck& check, const NcclCommunicator& comm, int ranks,
                        const char* ranks_name) {
  check.require(!comm.empty(),
                "comm is empty, expected a communicator (NcclCommunicator::wrap or create)");
  if (check.ok()) {
    check.require(comm.size() == ranks, "comm has ", comm.size(), " ranks but ", ranks_name, "=",
                  ranks, ", expected them to agree");
  }
}

void check_on_cuda(ArgCheck& check, const char* name, const TensorView& view) {
  check.require(!view.defined() || view.device == Device::kCUDA, name, " is on ",
                device_name(view.device), ", expected cuda (NCCL moves device memory)");
}

}  // namespace

bool has_nccl() {
#ifdef FLASHINDEXER_WITH_NCCL
  return multigpu::nccl_library() != nullptr;
#else
  return false;
#endif
}

int nccl_version() {
#ifdef FLASHINDEXER_WITH_NCCL
  const multigpu::NcclLibrary* library = multigpu::nccl_library();
  int version = 0;
  if (library == nullptr || library->get_version(&version) != ncclSuccess) return 0;
  return version;
#else
  return 0;
#endif
}

Status nccl_unique_id(NcclUniqueId* id) {
  const Library* library = nullptr;
  if (Status status = library_status("nccl_unique_id", &library); !status.ok()) return status;
  if (id == nullptr) return Status::InvalidArgument("nccl_unique_id: id is null");
#ifdef FLASHINDEXER_WITH_NCCL
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueId::bytes), "NCCL_UNIQUE_ID_BYTES");
  ncclUniqueId nccl_id;
  const Status status =
      nccl_status(*library, library->get_unique_id(&nccl_id), "nccl_unique_id", "ncclGetUniqueId");
  if (status.ok()) std::memcpy(id->bytes.data(), &nccl_id, sizeof nccl_id);
  return status;
#else
  return Status::Ok();
#endif
}

NcclCommunicator::~NcclCommunicator() { reset(); }

NcclCommunicator::NcclCommunicator(NcclCommunicator&& other) noexcept { *this = std::move(other); }

NcclCommunicator& NcclCommunicator::operator=(NcclCommunicator&& other) noexcept {
  if (this != &other) {
    reset();
    std::swap(comm_, other.comm_);
    std::swap(rank_, other.rank_);
    std::swap(size_, other.size_);
    std::swap(owned_, other.owned_);
  }
  return *this;
}

void NcclCommunicator::reset() {
#ifdef FLASHINDEXER_WITH_NCCL
  if (owned_ && comm_ != nullptr) {
    // Only an owned communicator exists, so the library is loaded.
    multigpu::nccl_library()->comm_destroy(static_cast<ncclComm_t>(comm_));
  }
#endif
  comm_ = nullptr;
  rank_ = size_ = 0;
  owned_ = false;
}

Status NcclCommunicator::wrap(NcclCommunicator* communicator, void* nccl_comm) {
  const char* op = "NcclCommunicator::wrap";
  const Library* library = nullptr;
  if (Status status = library_status(op, &library); !status.ok()) return status;
  if (communicator == nullptr) {
    return Status::InvalidArgument(concat(op, ": communicator is null"));
  }
  if (nccl_comm == nullptr) {
    return Status::InvalidArgument(concat(op, ": nccl_comm is null, expected an ncclComm_t"));
  }
#ifdef FLASHINDEXER_WITH_NCCL
  auto* comm = static_cast<ncclComm_t>(nccl_comm);
  int size = 0;
  int rank = 0;
  Status status = nccl_status(*library, library->comm_count(comm, &size), op, "ncclCommCount");
  if (status.ok()) {
    status = nccl_status(*library, library->comm_user_rank(comm, &rank), op, "ncclCommUserRank");
  }
  if (!status.ok()) return status;
  *communicator = NcclCommunicator(nccl_comm, rank, size, /*owned=*/false);
#endif
  return Status::Ok();
}

Status NcclCommunicator::create(NcclCommunicator* communicator, const NcclUniqueId& id, int rank,
                                int world_size) {
  const char* op = "NcclCommunicator::create";
  const Library* library = nullptr;
  if (Status status = library_status(op, &library); !status.ok()) return status;
  ArgCheck check(op);
  check.require(communicator != nullptr, "communicator is null")
      .require(world_size >= 1, "world_size=", world_size, ", expected >= 1")
      .require(rank >= 0 && rank < world_size, "rank=", rank,
               ", expected 0 <= rank < world_size=", world_size);
  if (!check.ok()) return check.status();
#ifdef FLASHINDEXER_WITH_NCCL
  ncclUniqueId nccl_id;
  std::memcpy(&nccl_id, id.bytes.data(), sizeof nccl_id);
  ncclComm_t comm = nullptr;
  const Status status = nccl_status(
      *library, library->comm_init_rank(&comm, world_size, nccl_id, rank), op, "ncclCommInitRank");
  if (!status.ok()) return status;
  *communicator = NcclCommunicator(comm, rank, world_size, /*owned=*/true);
#else
  (void)id;
#endif
  return Status::Ok();
}

size_t dcp_topk_allgather_workspace_size(int64_t rows, int k, int ranks) {
  if (rows <= 0 || k <= 0 || ranks <= 0) return 0;
  return static_cast<size_t>(ranks) * static_cast<size_t>(rows) * static_cast<size_t>(k) *
         sizeof(int64_t);
}

Status dcp_topk_allgather(const TensorView& out, const TensorView& logits,
                          const TensorView& local_topk, const TensorView& row_starts, int k,
                          const DcpGroup& group, const NcclCommunicator& comm,
                          const RunOptions& options) {
  const char* op = "dcp_topk_allgather";
  const Library* library = nullptr;
  if (Status status = library_status(op, &library); !status.ok()) return status;
  ArgCheck check(op);
  check_communicator(check, comm, group.ranks, "group.ranks");
  check.tensor("logits", logits, {DType::kF32, DType::kBF16}, 2);
  check_on_cuda(check, "logits", logits);
  check_on_cuda(check, "local_topk", local_topk);
  check_on_cuda(check, "row_starts", row_starts);
  check_on_cuda(check, "out", out);
  check.require(k >= 1 && k <= kMaxDcpTopK, "k=", k, ", expected 1 <= k <= ", kMaxDcpTopK);
  if (!check.ok()) return check.status();
  const int64_t rows = logits.shape[0];
  // The output is checked before any collective, so a bad one fails on every rank alike.
  check_topk_output(check, out, rows, k);  // k is already known to be in [1, kMaxDcpTopK]
  if (!check.ok()) return check.status();
  const size_t needed = dcp_topk_allgather_workspace_size(rows, k, group.ranks);
  if (needed > 0 && (options.workspace == nullptr || options.workspace_bytes < needed)) {
    return Status::WorkspaceTooSmall(concat(
        op, ": workspace has ", options.workspace == nullptr ? 0 : options.workspace_bytes,
        " bytes, expected at least ", needed, " (dcp_topk_allgather_workspace_size; CUDA memory)"));
  }
  if (reinterpret_cast<uintptr_t>(options.workspace) % 16 != 0) {
    return Status::InvalidArgument(concat(op, ": workspace is not 16-byte aligned"));
  }
  // The gathered buffer [N, rows, k]; this rank packs straight into its own block, which makes
  // the all-gather in place (sendbuff == recvbuff + rank * count).
  auto* gathered = static_cast<int64_t*>(options.workspace);
  const int64_t block = rows * k;
  TensorView own =
      TensorView::contiguous(gathered + comm.rank() * block, DType::kI64, {rows, k}, Device::kCUDA);
  Status status =
      dcp_pack_candidates(own, logits, local_topk, row_starts, k, comm.rank(), group, options);
  if (!status.ok() || rows == 0) return status;
#ifdef FLASHINDEXER_WITH_NCCL
  status = nccl_status(*library,
                       library->all_gather(own.data, gathered, static_cast<size_t>(block),
                                           ncclInt64, static_cast<ncclComm_t>(comm.handle()),
                                           static_cast<cudaStream_t>(options.cuda_stream)),
                       op, "ncclAllGather");
  if (!status.ok()) return status;
#endif
  TensorView all =
      TensorView::contiguous(gathered, DType::kI64, {group.ranks, rows, k}, Device::kCUDA);
  // [N, rows, k] viewed as [rows, N, k]: no transpose.
  std::swap(all.shape[0], all.shape[1]);
  std::swap(all.stride[0], all.stride[1]);
  return dcp_merge_topk(out, all, k, group.ranks, TopKOptions{true}, options);
}

Status tp_allgather_rows(const TensorView& buffer, const TensorView& sizes, int64_t first_row,
                         const NcclCommunicator& comm, const RunOptions& options) {
  const char* op = "tp_allgather_rows";
  const Library* library = nullptr;
  if (Status status = library_status(op, &library); !status.ok()) return status;
  ArgCheck check(op);
  check.tensor("sizes", sizes, {DType::kI32}, 1).on_device("sizes", sizes, Device::kCPU);
  if (!check.ok()) return check.status();
  const int64_t tp = sizes.shape[0];
  check_communicator(check, comm, static_cast<int>(tp), "the length of sizes");
  check.tensor("buffer", buffer, {DType::kI32}, 2);
  check_on_cuda(check, "buffer", buffer);
  if (!check.ok()) return check.status();
  check.stride_at_least("buffer", buffer, 0, buffer.shape[1])
      .require(first_row >= 0, "first_row=", first_row, ", expected >= 0");
  int64_t end = first_row;
  for (int64_t j = 0; j < tp && check.ok(); ++j) {
    const int32_t size = *element<int32_t>(sizes, j);
    check.require(size >= 0, "sizes entry ", j, " is ", size, ", expected >= 0");
    end += size;
  }
  if (check.ok()) {
    check.require(end <= buffer.shape[0], "first_row + sum(sizes) = ", end, " exceeds the ",
                  buffer.shape[0], " rows of buffer");
  }
  if (!check.ok()) return check.status();
  const int64_t width = buffer.shape[1];
  const int64_t row_stride = buffer.stride[0];
  if (width == 0 || end == first_row) return Status::Ok();
#ifdef FLASHINDEXER_WITH_NCCL
  auto* comm_handle = static_cast<ncclComm_t>(comm.handle());
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  // One broadcast per rank, in place (each rank's rows are already where every rank wants
  // them), grouped so NCCL runs them as one operation.
  Status status = nccl_status(*library, library->group_start(), op, "ncclGroupStart");
  if (!status.ok()) return status;
  int64_t row = first_row;
  for (int64_t j = 0; j < tp; ++j) {
    const int64_t count = *element<int32_t>(sizes, j);
    if (count > 0 && status.ok()) {
      int32_t* window = buffer.ptr<int32_t>() + row * row_stride;
      const size_t elements = static_cast<size_t>((count - 1) * row_stride + width);
      status = nccl_status(*library,
                           library->broadcast(window, window, elements, ncclInt32,
                                              static_cast<int>(j), comm_handle, stream),
                           op, "ncclBroadcast");
    }
    row += count;
  }
  const Status ended = nccl_status(*library, library->group_end(), op, "ncclGroupEnd");
  return status.ok() ? ended : status;
#else
  (void)options;
  (void)row_stride;
  return Status::Ok();
#endif
}

}  // namespace flashindexer
