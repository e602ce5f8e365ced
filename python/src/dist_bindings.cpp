// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: the transport-free multi-GPU functions (flashindexer/dist.h) over DLPack
// tensors, and whether this build can use NCCL. The NCCL collectives themselves are not bound:
// a Python engine already owns its communicator (torch.distributed) and runs the all-gather
// between dcp_pack_candidates and dcp_merge_topk itself.
#include "dist_bindings.h"

#include <nanobind/stl/tuple.h>

#include <cstdint>
#include <tuple>

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

}  // namespace

void register_dist(nb::module_& m) {
  const auto stream = nb::arg("stream") = 0;
  const auto threads = nb::arg("cpu_threads") = 0;
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.attr("MAX_DCP_TOPK") = kMaxDcpTopK;
  m.def("dcp_pack_candidates", &dcp_pack_candidates_binding, any("candidates"), any("logits"),
        any("local_topk"), any("row_starts") = nb::none(), nb::arg("k"), nb::arg("rank"),
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
}

}  // namespace flashindexer::python
