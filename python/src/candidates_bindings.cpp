// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: the candidate-block ops (flashindexer/candidates.h) over any DLPack tensor.
// Row bounds come as ks (None: the decode form, start 0), ke and row_repeat, as vLLM passes them.
#include "candidates_bindings.h"

#include <cstdint>

#include "flashindexer/candidates.h"
#include "tensor_args.h"

namespace flashindexer::python {
namespace {

namespace nb = nanobind;

CandidateRows bounds_of(ArgumentList& args, nb::handle ks, nb::handle ke, int row_repeat) {
  CandidateRows rows;
  rows.ks = args.input("ks", ks);
  rows.ke = args.input("ke", ke);
  rows.row_repeat = row_repeat;
  return rows;
}

void select_candidate_blocks_binding(nb::handle out, nb::handle logits, int num_blocks,
                                     int block_size, nb::handle ks, nb::handle ke, int row_repeat,
                                     uintptr_t stream, nb::handle workspace, int cpu_threads) {
  ArgumentList args("select_candidate_blocks");
  const TensorView logits_view = args.input("logits", logits);
  const CandidateRows rows = bounds_of(args, ks, ke, row_repeat);
  const TensorView out_view = args.output("out", out);
  const RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return select_candidate_blocks(out_view, logits_view, rows, num_blocks, block_size, options);
  });
}

void apply_candidate_mask_binding(nb::handle logits, nb::handle candidates, int block_size,
                                  nb::handle ks, nb::handle ke, int row_repeat, uintptr_t stream,
                                  int cpu_threads) {
  ArgumentList args("apply_candidate_mask");
  const TensorView logits_view = args.output("logits", logits);
  const TensorView candidate_view = args.input("candidates", candidates);
  const CandidateRows rows = bounds_of(args, ks, ke, row_repeat);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run(
      [&] { return apply_candidate_mask(logits_view, rows, candidate_view, block_size, options); });
}

void candidate_topk_per_row_binding(nb::handle out, nb::handle logits, nb::handle candidates,
                                    int block_size, int k, nb::handle ks, nb::handle ke,
                                    int row_repeat, bool sorted, bool vllm_compatible,
                                    uintptr_t stream, nb::handle workspace, int cpu_threads) {
  ArgumentList args("candidate_topk_per_row");
  // The vLLM-compatible mode masks the logits in place.
  const TensorView logits_view =
      vllm_compatible ? args.output("logits", logits) : args.input("logits", logits);
  const TensorView candidate_view = args.input("candidates", candidates);
  const CandidateRows rows = bounds_of(args, ks, ke, row_repeat);
  const TensorView out_view = args.output("out", out);
  const RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return candidate_topk_per_row(out_view, logits_view, rows, candidate_view, block_size, k,
                                  CandidateTopKOptions{sorted, vllm_compatible}, options);
  });
}

void candidate_blocks_to_sparse_indices_binding(nb::handle sparse_indices, nb::handle end,
                                                nb::handle candidates, int block_size,
                                                int sparse_block, nb::handle ks, nb::handle ke,
                                                int row_repeat, uintptr_t stream, int cpu_threads) {
  ArgumentList args("candidate_blocks_to_sparse_indices");
  const TensorView candidate_view = args.input("candidates", candidates);
  const CandidateRows rows = bounds_of(args, ks, ke, row_repeat);
  const TensorView sparse_view = args.output("sparse_indices", sparse_indices);
  const TensorView end_view = args.output("end", end);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return candidate_blocks_to_sparse_indices(sparse_view, end_view, candidate_view, rows,
                                              block_size, sparse_block, options);
  });
}

void sparse_topk_remap_binding(nb::handle out, nb::handle columns, nb::handle sparse_indices,
                               int sparse_block, nb::handle ks, int row_repeat, uintptr_t stream,
                               int cpu_threads) {
  ArgumentList args("sparse_topk_remap");
  const TensorView columns_view = args.input("columns", columns);
  const TensorView sparse_view = args.input("sparse_indices", sparse_indices);
  const CandidateRows rows = bounds_of(args, ks, nb::none(), row_repeat);
  const TensorView out_view = args.output("out", out);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return sparse_topk_remap(out_view, columns_view, sparse_view, rows, sparse_block, options);
  });
}

void build_sparse_consumer_rows_prefill_binding(nb::handle sparse_rows, nb::handle candidates,
                                                int block_size, nb::handle ks, nb::handle ke,
                                                int64_t num_keys, uintptr_t stream) {
  ArgumentList args("build_sparse_consumer_rows_prefill");
  const CandidateInput input{args.input("candidates", candidates), block_size, false};
  const TensorView ks_view = args.input("ks", ks);
  const TensorView ke_view = args.input("ke", ke);
  const TensorView rows_view = args.output("sparse_rows", sparse_rows);
  const RunOptions options = args.options(stream, nb::none(), 0);
  args.run([&] {
    return build_sparse_consumer_rows_prefill(rows_view, input, ks_view, ke_view, num_keys,
                                              options);
  });
}

void build_sparse_consumer_rows_decode_binding(nb::handle sparse_rows, nb::handle candidates,
                                               int block_size, nb::handle context_lens,
                                               nb::handle block_table, int next_n, nb::handle cache,
                                               uintptr_t stream) {
  ArgumentList args("build_sparse_consumer_rows_decode");
  const CandidateInput input{args.input("candidates", candidates), block_size, false};
  const TensorView lens_view = args.input("context_lens", context_lens);
  const TensorView table_view = args.input("block_table", block_table);
  const PagedKCache cache_view = args.cache("cache", cache, /*writable=*/false);
  const TensorView rows_view = args.output("sparse_rows", sparse_rows);
  const RunOptions options = args.options(stream, nb::none(), 0);
  args.run([&] {
    return build_sparse_consumer_rows_decode(rows_view, input, lens_view, table_view, next_n,
                                             cache_view, options);
  });
}

}  // namespace

void register_candidates(nb::module_& m) {
  const auto stream = nb::arg("stream") = 0;
  const auto threads = nb::arg("cpu_threads") = 0;
  const auto workspace = nb::arg("workspace").none() = nb::none();
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.attr("MAX_CANDIDATE_BLOCKS") = kMaxCandidateBlocks;
  m.def("select_candidate_blocks", &select_candidate_blocks_binding, any("out"), any("logits"),
        nb::arg("num_blocks"), nb::arg("block_size"), any("ks"), any("ke"),
        nb::arg("row_repeat") = 1, stream, workspace, threads);
  m.def("apply_candidate_mask", &apply_candidate_mask_binding, any("logits"), any("candidates"),
        nb::arg("block_size"), any("ks"), any("ke"), nb::arg("row_repeat") = 1, stream, threads);
  m.def("candidate_topk_per_row", &candidate_topk_per_row_binding, any("out"), any("logits"),
        any("candidates"), nb::arg("block_size"), nb::arg("k"), any("ks"), any("ke"),
        nb::arg("row_repeat") = 1, nb::arg("sorted") = false, nb::arg("vllm_compatible") = false,
        stream, workspace, threads);
  m.def("candidate_blocks_to_sparse_indices", &candidate_blocks_to_sparse_indices_binding,
        any("sparse_indices"), any("end"), any("candidates"), nb::arg("block_size"),
        nb::arg("sparse_block"), any("ks"), any("ke"), nb::arg("row_repeat") = 1, stream, threads);
  m.def("build_sparse_consumer_rows_prefill", &build_sparse_consumer_rows_prefill_binding,
        any("sparse_rows"), any("candidates"), nb::arg("block_size"), any("ks"), any("ke"),
        nb::arg("num_keys"), stream);
  m.def("build_sparse_consumer_rows_decode", &build_sparse_consumer_rows_decode_binding,
        any("sparse_rows"), any("candidates"), nb::arg("block_size"), any("context_lens"),
        any("block_table"), nb::arg("next_n"), any("cache"), stream);
  m.def("sparse_consumer_rows_size", &sparse_consumer_rows_size, nb::arg("rows"),
        nb::arg("num_candidates"), nb::arg("block_size"));
  m.def("sparse_topk_remap", &sparse_topk_remap_binding, any("out"), any("columns"),
        any("sparse_indices"), nb::arg("sparse_block"), any("ks"), nb::arg("row_repeat") = 1,
        stream, threads);
  m.def(
      "select_candidate_blocks_cuda_workspace_size",
      [](int64_t rows, int64_t width, int num_blocks, int block_size, int device) {
        size_t bytes = 0;
        ArgumentList::run_on(device, [&] {
          bytes = select_candidate_blocks_cuda_workspace_size(rows, width, num_blocks, block_size);
        });
        return bytes;
      },
      nb::arg("rows"), nb::arg("width"), nb::arg("num_blocks"), nb::arg("block_size"),
      nb::arg("device") = -1);
  m.def(
      "candidate_topk_per_row_cuda_workspace_size",
      [](int64_t rows, int64_t width, int num_blocks, int block_size, int k, int device) {
        size_t bytes = 0;
        ArgumentList::run_on(device, [&] {
          bytes =
              candidate_topk_per_row_cuda_workspace_size(rows, width, num_blocks, block_size, k);
        });
        return bytes;
      },
      nb::arg("rows"), nb::arg("width"), nb::arg("num_blocks"), nb::arg("block_size"), nb::arg("k"),
      nb::arg("device") = -1);
}

}  // namespace flashindexer::python
