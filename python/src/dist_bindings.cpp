// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: the transport-free multi-GPU functions (flashindexer/dist.h) over DLPack
// tensors, and the NCCL transport (flashindexer/nccl.h): the communicator (wrapping the caller's
// ncclComm_t or created from a unique id), the DCP top-k all-gather and the TP row all-gather.
// An engine that runs its own all-gather (torch.distributed) uses dcp_pack_candidates and
// dcp_merge_topk around it instead. Without NCCL (not built, or libnccl.so.2 not loadable) the
// NCCL entries raise NotImplementedError.
#include "dist_bindings.h"

#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "flashindexer/flashindexer.h"
#include "flashindexer/nccl.h"
#include "tensor_args.h"

namespace flashindexer::python {
namespace {

namespace nb = nanobind;

void dcp_pack_candidates_binding(nb::handle candidates, nb::handle logits, nb::handle local_topk,
                                 nb::handle row_starts, int k, int rank, int ranks, int interleave,
                                 uintptr_t stream, int cpu_threads) {
  ArgumentList args("dcp_pack_candidates");
  const TensorView logits_view = args.input("logits", logits);
  const TensorView topk_view = args.input("local_topk", local_topk);
  const TensorView starts_view = args.input("row_starts", row_starts);
  const TensorView candidates_view = args.output("candidates", candidates);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return dcp_pack_candidates(candidates_view, logits_view, topk_view, starts_view, k, rank,
                               DcpGroup{ranks, interleave}, options);
  });
}

void dcp_pack_candidates_from_scores_binding(nb::handle candidates, nb::handle scores,
                                             nb::handle local_topk, int k, int rank, int ranks,
                                             int interleave, uintptr_t stream, int cpu_threads) {
  ArgumentList args("dcp_pack_candidates_from_scores");
  const TensorView scores_view = args.input("scores", scores);
  const TensorView topk_view = args.input("local_topk", local_topk);
  const TensorView candidates_view = args.output("candidates", candidates);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return dcp_pack_candidates_from_scores(candidates_view, scores_view, topk_view, k, rank,
                                           DcpGroup{ranks, interleave}, options);
  });
}

void dcp_merge_topk_binding(nb::handle out, nb::handle gathered, int k, int ranks, bool sorted,
                            uintptr_t stream, nb::handle workspace, int cpu_threads) {
  ArgumentList args("dcp_merge_topk");
  const TensorView gathered_view = args.input("gathered", gathered);
  const TensorView out_view = args.output("out", out);
  const RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return dcp_merge_topk(out_view, gathered_view, k, ranks, TopKOptions{.sorted = sorted},
                          options);
  });
}

void tp_row_shard_plan_binding(nb::handle sizes, nb::handle costs, int tp) {
  ArgumentList args("tp_row_shard_plan");
  const TensorView costs_view = args.input("costs", costs);
  const TensorView sizes_view = args.output("sizes", sizes);
  args.run([&] { return tp_row_shard_plan(sizes_view, costs_view, tp); });
}

// (start, end) of the rank's window in the chunk; the Python side slices ks / ke.
std::tuple<int64_t, int64_t> tp_row_shard_narrow_binding(nb::handle sizes, int rank,
                                                         int64_t first_prefill_row,
                                                         int64_t chunk_row_start,
                                                         nb::handle chunk_ks, nb::handle chunk_ke) {
  ArgumentList args("tp_row_shard_narrow");
  const TensorView sizes_view = args.input("sizes", sizes);
  const TensorView ks_view = args.input("chunk_ks", chunk_ks);
  const TensorView ke_view = args.input("chunk_ke", chunk_ke);
  TpRowWindow window;
  args.run([&] {
    return tp_row_shard_narrow(&window, sizes_view, rank, first_prefill_row, chunk_row_start,
                               ks_view, ke_view);
  });
  return {window.start, window.end};
}

nb::bytes nccl_unique_id_binding() {
  NcclUniqueId id;
  raise_if_error(nccl_unique_id(&id));
  return nb::bytes(id.bytes.data(), id.bytes.size());
}

NcclCommunicator wrap_communicator(uintptr_t nccl_comm) {
  NcclCommunicator comm;
  raise_if_error(NcclCommunicator::wrap(&comm, reinterpret_cast<void*>(nccl_comm)));
  return comm;
}

// Collective: blocks until every rank has joined, so the GIL is released meanwhile.
NcclCommunicator create_communicator(nb::bytes unique_id, int rank, int world_size) {
  NcclUniqueId id;
  if (unique_id.size() != id.bytes.size()) {
    raise(PyExc_ValueError, "NcclCommunicator.create: unique_id has " +
                                std::to_string(unique_id.size()) + " bytes, expected " +
                                std::to_string(id.bytes.size()) + " (from nccl_unique_id())");
  }
  std::memcpy(id.bytes.data(), unique_id.c_str(), id.bytes.size());
  NcclCommunicator comm;
  Status status;
  {
    nb::gil_scoped_release released;
    status = NcclCommunicator::create(&comm, id, rank, world_size);
  }
  raise_if_error(status);
  return comm;
}

void dcp_topk_allgather_binding(nb::handle out, nb::handle logits, nb::handle local_topk,
                                nb::handle row_starts, int k, int interleave,
                                const NcclCommunicator& comm, uintptr_t stream,
                                nb::handle workspace) {
  ArgumentList args("dcp_topk_allgather");
  const TensorView logits_view = args.input("logits", logits);
  const TensorView topk_view = args.input("local_topk", local_topk);
  const TensorView starts_view = args.input("row_starts", row_starts);
  const TensorView out_view = args.output("out", out);
  const RunOptions options = args.options(stream, workspace, 0);
  args.run([&] {
    return dcp_topk_allgather(out_view, logits_view, topk_view, starts_view, k,
                              DcpGroup{comm.size(), interleave}, comm, options);
  });
}

void tp_allgather_rows_binding(nb::handle buffer, nb::handle sizes, int64_t first_row,
                               const NcclCommunicator& comm, uintptr_t stream) {
  ArgumentList args("tp_allgather_rows");
  const TensorView sizes_view = args.input("sizes", sizes);
  const TensorView buffer_view = args.output("buffer", buffer);
  const RunOptions options = args.options(stream, nb::none(), 0);
  args.run([&] { return tp_allgather_rows(buffer_view, sizes_view, first_row, comm, options); });
}

}  // namespace

void register_dist(nb::module_& m) {
  const auto stream = nb::arg("stream") = 0;
  const auto threads = nb::arg("cpu_threads") = 0;
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.attr("MAX_DCP_TOPK") = kMaxDcpTopK;
  m.def("dcp_pack_candidates", &dcp_pack_candidates_binding, any("candidates"), any("logits"),
        any("local_topk"), any("row_starts") = nb::none(), nb::arg("k"), nb::arg("rank"),
        nb::arg("ranks"), nb::arg("interleave") = 1, stream, threads);
  m.def("dcp_pack_candidates_from_scores", &dcp_pack_candidates_from_scores_binding,
        any("candidates"), any("scores"), any("local_topk"), nb::arg("k"), nb::arg("rank"),
        nb::arg("ranks"), nb::arg("interleave") = 1, stream, threads);
  m.def("dcp_merge_topk", &dcp_merge_topk_binding, any("out"), any("gathered"), nb::arg("k"),
        nb::arg("ranks"), nb::arg("sorted") = false, stream,
        nb::arg("workspace").none() = nb::none(), threads);
  m.def("dcp_merge_topk_cpu_workspace_size", &dcp_merge_topk_cpu_workspace_size, nb::arg("ranks"),
        nb::arg("k"), nb::arg("threads") = 0);
  m.def("tp_row_shard_plan", &tp_row_shard_plan_binding, any("sizes"), any("costs"), nb::arg("tp"));
  m.def("tp_row_shard_narrow", &tp_row_shard_narrow_binding, any("sizes"), nb::arg("rank"),
        nb::arg("first_prefill_row"), nb::arg("chunk_row_start"), any("chunk_ks"), any("chunk_ke"));
  m.def("has_nccl", &has_nccl);
  m.def("nccl_version", &nccl_version);
  m.def("nccl_unique_id", &nccl_unique_id_binding);
  nb::class_<NcclCommunicator>(
      m, "NcclCommunicator",
      "An NCCL communicator: NcclCommunicator.wrap(nccl_comm) wraps the caller's ncclComm_t (an "
      "integer address, never destroyed here); NcclCommunicator.create(unique_id, rank, "
      "world_size) creates one on the current CUDA device from nccl_unique_id()'s bytes "
      "(collective; destroyed with the object).")
      .def(nb::init<>())
      .def_static("wrap", &wrap_communicator, nb::arg("nccl_comm"))
      .def_static("create", &create_communicator, nb::arg("unique_id"), nb::arg("rank"),
                  nb::arg("world_size"))
      .def_prop_ro("empty", &NcclCommunicator::empty)
      .def_prop_ro("rank", &NcclCommunicator::rank)
      .def_prop_ro("size", &NcclCommunicator::size)
      .def_prop_ro("owned", &NcclCommunicator::owned)
      .def_prop_ro("handle", [](const NcclCommunicator& comm) {
        return reinterpret_cast<uintptr_t>(comm.handle());
      });
  m.def("dcp_topk_allgather", &dcp_topk_allgather_binding, any("out"), any("logits"),
        any("local_topk"), any("row_starts") = nb::none(), nb::arg("k"), nb::arg("interleave"),
        nb::arg("comm"), stream, nb::arg("workspace").none() = nb::none());
  m.def("dcp_topk_allgather_workspace_size", &dcp_topk_allgather_workspace_size, nb::arg("rows"),
        nb::arg("k"), nb::arg("ranks"));
  m.def("tp_allgather_rows", &tp_allgather_rows_binding, any("buffer"), any("sizes"),
        nb::arg("first_row"), nb::arg("comm"), stream);
}

}  // namespace flashindexer::python
