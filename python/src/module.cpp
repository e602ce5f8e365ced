// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: the C++ API over any DLPack tensor, one function per op.
//
// Every function takes its outputs (the Python package allocates them when the caller does not),
// the inputs, and the run options: `stream` (a cudaStream_t as an integer; 0 = the legacy
// default stream), `workspace` (a tensor on the op's device, or None to let the op allocate on
// the CPU) and `cpu_threads` (0 = the OpenMP default). Argument rules and dtypes are in
// tensor_args.h; shapes in the C++ headers and in the Python package's docstrings. Nothing here
// touches CUDA at import time.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "candidates_bindings.h"
#include "dist_bindings.h"
#include "flashindexer/flashindexer.h"
#include "flashindexer/nccl.h"
#include "planning_bindings.h"
#include "query_bindings.h"
#include "tensor_args.h"

namespace nb = nanobind;
namespace fi = flashindexer;
using fi::python::ArgumentList;

namespace {

fi::QuantizedTensor quantized_input(ArgumentList& args, const char* values_name, nb::handle values,
                                    const char* scales_name, nb::handle scales, bool mxfp4) {
  return {args.input(values_name, values, mxfp4 ? fi::DType::kE2M1x2 : fi::DType::kE4M3),
          args.input(scales_name, scales, fi::DType::kUE8M0)};
}

// FP8 queries carry no scales (folded into the weights); MXFP4 queries always do.
bool is_mxfp4_query(nb::handle q_scales) { return !q_scales.is_none(); }

void quantize_k_fp8(nb::handle values, nb::handle scales, nb::handle input, uintptr_t stream,
                    int cpu_threads) {
  ArgumentList args("quantize_k_fp8");
  const fi::TensorView input_view = args.input("input", input);
  const fi::TensorView values_view = args.output("values", values, fi::DType::kE4M3);
  const fi::TensorView scales_view = args.output("scales", scales);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] { return fi::quantize_k_fp8(values_view, scales_view, input_view, options); });
}

void dequantize_k_fp8(nb::handle out, nb::handle values, nb::handle scales, uintptr_t stream,
                      int cpu_threads) {
  ArgumentList args("dequantize_k_fp8");
  const fi::TensorView values_view = args.input("values", values, fi::DType::kE4M3);
  const fi::TensorView scales_view = args.input("scales", scales);
  const fi::TensorView out_view = args.output("out", out);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] { return fi::dequantize_k_fp8(out_view, values_view, scales_view, options); });
}

void quantize_mxfp4(nb::handle values, nb::handle scales, nb::handle input, uintptr_t stream,
                    int cpu_threads) {
  ArgumentList args("quantize_mxfp4");
  const fi::TensorView input_view = args.input("input", input);
  const fi::TensorView values_view = args.output("values", values, fi::DType::kE2M1x2);
  const fi::TensorView scales_view = args.output("scales", scales, fi::DType::kUE8M0);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] { return fi::quantize_mxfp4(values_view, scales_view, input_view, options); });
}

void dequantize_mxfp4(nb::handle out, nb::handle values, nb::handle scales, uintptr_t stream,
                      int cpu_threads) {
  ArgumentList args("dequantize_mxfp4");
  const fi::TensorView values_view = args.input("values", values, fi::DType::kE2M1x2);
  const fi::TensorView scales_view = args.input("scales", scales, fi::DType::kUE8M0);
  const fi::TensorView out_view = args.output("out", out);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] { return fi::dequantize_mxfp4(out_view, values_view, scales_view, options); });
}

void insert_k_cache(nb::handle cache, nb::handle keys, nb::handle slot_mapping, uintptr_t stream,
                    int cpu_threads) {
  ArgumentList args("insert_k_cache");
  const fi::TensorView keys_view = args.input("keys", keys);
  const fi::TensorView slots_view = args.input("slot_mapping", slot_mapping);
  const fi::PagedKCache cache_view = args.cache("cache", cache, /*writable=*/true);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] { return fi::insert_k_cache(cache_view, keys_view, slots_view, options); });
}

void gather_k_workspace(nb::handle values, nb::handle scales, nb::handle cache,
                        nb::handle block_table, nb::handle cu_seq_lens, uintptr_t stream,
                        int cpu_threads) {
  ArgumentList args("gather_k_workspace");
  const fi::PagedKCache cache_view = args.cache("cache", cache, /*writable=*/false);
  const bool mxfp4 = cache_view.format == fi::KFormat::kMXFP4;
  const fi::TensorView values_view =
      args.output("values", values, mxfp4 ? fi::DType::kE2M1x2 : fi::DType::kE4M3);
  const fi::TensorView scales_view = args.output("scales", scales, fi::DType::kUE8M0);
  const fi::TensorView table_view = args.input("block_table", block_table);
  const fi::TensorView lens_view = args.input("cu_seq_lens", cu_seq_lens);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return fi::gather_k_workspace(values_view, scales_view, cache_view, table_view, lens_view,
                                  options);
  });
}

// The scoring inputs mqa_logits and indexer_prefill share, imported once.
struct PrefillInputs {
  fi::QuantizedTensor q, keys;
  fi::TensorView weights, ks, ke;
};

PrefillInputs prefill_inputs(ArgumentList& args, nb::handle q_values, nb::handle q_scales,
                             nb::handle k_values, nb::handle k_scales, nb::handle weights,
                             nb::handle ks, nb::handle ke) {
  const bool mxfp4 = is_mxfp4_query(q_scales);
  PrefillInputs in;
  in.q = quantized_input(args, "q.values", q_values, "q.scales", q_scales, mxfp4);
  in.keys = quantized_input(args, "keys.values", k_values, "keys.scales", k_scales, mxfp4);
  in.weights = args.input("weights", weights);
  in.ks = args.input("ks", ks);
  in.ke = args.input("ke", ke);
  return in;
}

// The scoring inputs paged_mqa_logits and indexer_decode share, imported once.
struct DecodeInputs {
  fi::QuantizedTensor q;
  fi::PagedKCache cache;
  fi::TensorView weights, context_lens, block_table;
};

DecodeInputs decode_inputs(ArgumentList& args, nb::handle q_values, nb::handle q_scales,
                           nb::handle cache, nb::handle weights, nb::handle context_lens,
                           nb::handle block_table) {
  DecodeInputs in;
  in.q =
      quantized_input(args, "q.values", q_values, "q.scales", q_scales, is_mxfp4_query(q_scales));
  in.cache = args.cache("cache", cache, /*writable=*/false);
  in.weights = args.input("weights", weights);
  in.context_lens = args.input("context_lens", context_lens);
  in.block_table = args.input("block_table", block_table);
  return in;
}

void mqa_logits(nb::handle logits, nb::handle q_values, nb::handle q_scales, nb::handle k_values,
                nb::handle k_scales, nb::handle weights, nb::handle ks, nb::handle ke, bool clean,
                uintptr_t stream, nb::handle workspace, int cpu_threads) {
  ArgumentList args("mqa_logits");
  const PrefillInputs in =
      prefill_inputs(args, q_values, q_scales, k_values, k_scales, weights, ks, ke);
  const fi::TensorView logits_view = args.output("logits", logits);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return fi::mqa_logits(logits_view, in.q, in.keys, in.weights, in.ks, in.ke,
                          fi::LogitsOptions{.clean = clean}, options);
  });
}

void sparse_mqa_logits(nb::handle logits, nb::handle q_values, nb::handle q_scales,
                       nb::handle k_values, nb::handle k_scales, nb::handle weights,
                       nb::handle sparse_indices, nb::handle end, nb::handle ks, nb::handle ke,
                       int sparse_block, bool clean, uintptr_t stream, nb::handle workspace,
                       int cpu_threads) {
  ArgumentList args("sparse_mqa_logits");
  const PrefillInputs in =
      prefill_inputs(args, q_values, q_scales, k_values, k_scales, weights, ks, ke);
  const fi::TensorView indices_view = args.input("sparse_indices", sparse_indices);
  const fi::TensorView end_view = args.input("end", end);
  const fi::TensorView logits_view = args.output("logits", logits);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return fi::sparse_mqa_logits(logits_view, in.q, in.keys, in.weights, indices_view, end_view,
                                 fi::CandidateRows::prefill(in.ks, in.ke), sparse_block,
                                 fi::LogitsOptions{.clean = clean}, options);
  });
}

void paged_sparse_mqa_logits(nb::handle logits, nb::handle q_values, nb::handle q_scales,
                             nb::handle cache, nb::handle weights, nb::handle sparse_indices,
                             nb::handle end, nb::handle block_table, int sparse_block, bool clean,
                             uintptr_t stream, nb::handle workspace, int cpu_threads) {
  ArgumentList args("paged_sparse_mqa_logits");
  const fi::QuantizedTensor q =
      quantized_input(args, "q.values", q_values, "q.scales", q_scales, is_mxfp4_query(q_scales));
  const fi::PagedKCache cache_view = args.cache("cache", cache, /*writable=*/false);
  const fi::TensorView weights_view = args.input("weights", weights);
  const fi::TensorView indices_view = args.input("sparse_indices", sparse_indices);
  const fi::TensorView end_view = args.input("end", end);
  const fi::TensorView table_view = args.input("block_table", block_table);
  const fi::TensorView logits_view = args.output("logits", logits);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return fi::paged_sparse_mqa_logits(logits_view, q, cache_view, weights_view, indices_view,
                                       end_view, table_view, sparse_block,
                                       fi::LogitsOptions{.clean = clean}, options);
  });
}

void paged_mqa_logits(nb::handle logits, nb::handle q_values, nb::handle q_scales, nb::handle cache,
                      nb::handle weights, nb::handle context_lens, nb::handle block_table,
                      bool clean, uintptr_t stream, int cpu_threads) {
  ArgumentList args("paged_mqa_logits");
  const DecodeInputs in =
      decode_inputs(args, q_values, q_scales, cache, weights, context_lens, block_table);
  const fi::TensorView logits_view = args.output("logits", logits);
  const fi::RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return fi::paged_mqa_logits(logits_view, in.q, in.cache, in.weights, in.context_lens,
                                in.block_table, fi::LogitsOptions{.clean = clean}, options);
  });
}

void topk_per_row(nb::handle out, nb::handle logits, int k, nb::handle ks, nb::handle ke,
                  nb::handle lengths, int next_n, bool sorted, uintptr_t stream,
                  nb::handle workspace, int cpu_threads) {
  ArgumentList args("topk_per_row");
  const bool prefill = !ks.is_none() || !ke.is_none();
  if (prefill == !lengths.is_none()) {
    fi::python::raise(PyExc_ValueError,
                      "topk_per_row: pass either ks and ke (prefill rows) or lengths (decode "
                      "rows), not both and not neither");
  }
  const fi::TensorView logits_view = args.input("logits", logits);
  const fi::RowRanges ranges =
      prefill ? fi::RowRanges::prefill(args.input("ks", ks), args.input("ke", ke))
              : fi::RowRanges::decode(args.input("lengths", lengths), next_n);
  const fi::TensorView out_view = args.output("out", out);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  args.run([&] {
    return fi::topk_per_row(out_view, logits_view, ranges, k, fi::TopKOptions{.sorted = sorted},
                            options);
  });
}

fi::IndexerPath parse_path(const char* op, const std::string& path) {
  if (path == "auto") return fi::IndexerPath::kAuto;
  if (path == "dense") return fi::IndexerPath::kDense;
  if (path == "fused") return fi::IndexerPath::kFused;
  if (path == "sparse") return fi::IndexerPath::kSparse;
  fi::python::raise(PyExc_ValueError,
                    std::string(op) + ": path is \"" + path +
                        "\", expected \"auto\", \"dense\", \"fused\" or \"sparse\"");
}

void indexer_prefill(nb::handle out, nb::handle q_values, nb::handle q_scales, nb::handle k_values,
                     nb::handle k_scales, nb::handle weights, nb::handle ks, nb::handle ke, int k,
                     bool sorted, uintptr_t stream, nb::handle workspace, int cpu_threads,
                     const std::string& path, int64_t min_row_keys, nb::handle candidates,
                     int candidate_block_size, bool candidate_vllm_compatible, nb::handle scores,
                     nb::handle candidate_source, int candidate_source_block_size,
                     nb::handle candidate_rows) {
  ArgumentList args("indexer_prefill");
  const PrefillInputs in =
      prefill_inputs(args, q_values, q_scales, k_values, k_scales, weights, ks, ke);
  const fi::TensorView out_view = args.output("out", out);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  const fi::IndexerOptions indexer_options{
      .path = parse_path("indexer_prefill", path),
      .min_row_keys = min_row_keys,
      .candidates = {args.input("candidates", candidates), candidate_block_size,
                     candidate_vllm_compatible, args.input("candidate_rows", candidate_rows)},
      .scores = args.output("scores", scores),
      .candidate_source = {args.output("candidate_source", candidate_source),
                           candidate_source_block_size}};
  args.run([&] {
    return fi::indexer_prefill(out_view, in.q, in.keys, in.weights, in.ks, in.ke, k,
                               fi::TopKOptions{.sorted = sorted}, indexer_options, options);
  });
}

// "dense" or "fused": the CUDA path indexer_prefill takes (fi::cuda_prefill_path).
std::string cuda_prefill_path(int k, const std::string& path, int64_t min_row_keys,
                              int64_t num_keys) {
  const fi::IndexerOptions indexer_options{.path = parse_path("cuda_prefill_path", path),
                                           .min_row_keys = min_row_keys};
  return fi::cuda_prefill_path(k, indexer_options, num_keys) == fi::IndexerPath::kFused ? "fused"
                                                                                        : "dense";
}

void indexer_decode(nb::handle out, nb::handle q_values, nb::handle q_scales, nb::handle cache,
                    nb::handle weights, nb::handle context_lens, nb::handle block_table, int k,
                    bool sorted, uintptr_t stream, nb::handle workspace, int cpu_threads,
                    const std::string& path, nb::handle candidates, int candidate_block_size,
                    bool candidate_vllm_compatible, nb::handle scores, nb::handle candidate_source,
                    int candidate_source_block_size, nb::handle candidate_rows) {
  ArgumentList args("indexer_decode");
  const DecodeInputs in =
      decode_inputs(args, q_values, q_scales, cache, weights, context_lens, block_table);
  const fi::TensorView out_view = args.output("out", out);
  const fi::RunOptions options = args.options(stream, workspace, cpu_threads);
  const fi::IndexerOptions indexer_options{
      .path = parse_path("indexer_decode", path),
      .candidates = {args.input("candidates", candidates), candidate_block_size,
                     candidate_vllm_compatible, args.input("candidate_rows", candidate_rows)},
      .scores = args.output("scores", scores),
      .candidate_source = {args.output("candidate_source", candidate_source),
                           candidate_source_block_size}};
  args.run([&] {
    return fi::indexer_decode(out_view, in.q, in.cache, in.weights, in.context_lens, in.block_table,
                              k, fi::TopKOptions{.sorted = sorted}, indexer_options, options);
  });
}

fi::KFormat parse_format(const std::string& format) {
  if (format == "fp8") return fi::KFormat::kFP8;
  if (format == "mxfp4") return fi::KFormat::kMXFP4;
  fi::python::raise(PyExc_ValueError,
                    "format is \"" + format + "\", expected \"fp8\" or \"mxfp4\"");
}

nb::dict build_info() {
  const fi::BuildInfo info = fi::build_info();
  nb::dict result;
  result["version"] = fi::kVersion;
  result["cuda"] = info.cuda;
  result["cuda_archs"] = info.cuda_archs;
  result["compiler"] = info.compiler;
  result["nccl"] = fi::has_nccl();  // built with NCCL support and libnccl.so.2 loads here
  return result;
}

}  // namespace

NB_MODULE(_C, m) {
  m.doc() = "FlashIndexer C++ API over DLPack tensors (use the flashindexer package instead).";
  m.attr("__version__") = fi::kVersion;
  m.attr("MAX_TOPK") = fi::kMaxTopK;
  const auto stream = nb::arg("stream") = 0;
  const auto threads = nb::arg("cpu_threads") = 0;
  const auto workspace = nb::arg("workspace").none() = nb::none();
  const auto any = [](const char* name) { return nb::arg(name).none(); };

  m.def("quantize_k_fp8", &quantize_k_fp8, any("values"), any("scales"), any("input"), stream,
        threads);
  m.def("dequantize_k_fp8", &dequantize_k_fp8, any("out"), any("values"), any("scales"), stream,
        threads);
  m.def("quantize_mxfp4", &quantize_mxfp4, any("values"), any("scales"), any("input"), stream,
        threads);
  m.def("dequantize_mxfp4", &dequantize_mxfp4, any("out"), any("values"), any("scales"), stream,
        threads);
  m.def("insert_k_cache", &insert_k_cache, any("cache"), any("keys"), any("slot_mapping"), stream,
        threads);
  m.def("gather_k_workspace", &gather_k_workspace, any("values"), any("scales"), any("cache"),
        any("block_table"), any("cu_seq_lens"), stream, threads);
  m.def("mqa_logits", &mqa_logits, any("logits"), any("q_values"), any("q_scales"), any("k_values"),
        any("k_scales"), any("weights"), any("ks"), any("ke"), nb::arg("clean") = true, stream,
        workspace, threads);
  m.def(
      "mqa_logits_cuda_workspace_size",
      [](int64_t rows, int heads, int64_t num_keys) {
        return fi::mqa_logits_cuda_workspace_size(rows, heads, num_keys);
      },
      nb::arg("rows"), nb::arg("heads"), nb::arg("num_keys"));
  m.def("paged_mqa_logits", &paged_mqa_logits, any("logits"), any("q_values"), any("q_scales"),
        any("cache"), any("weights"), any("context_lens"), any("block_table"),
        nb::arg("clean") = true, stream, threads);
  m.def("sparse_mqa_logits", &sparse_mqa_logits, any("logits"), any("q_values"), any("q_scales"),
        any("k_values"), any("k_scales"), any("weights"), any("sparse_indices"), any("end"),
        any("ks"), any("ke"), nb::arg("sparse_block"), nb::arg("clean") = true, stream, workspace,
        threads);
  m.def("paged_sparse_mqa_logits", &paged_sparse_mqa_logits, any("logits"), any("q_values"),
        any("q_scales"), any("cache"), any("weights"), any("sparse_indices"), any("end"),
        any("block_table"), nb::arg("sparse_block"), nb::arg("clean") = true, stream, workspace,
        threads);
  m.def(
      "sparse_logits_cuda_workspace_size",
      [](int64_t rows, int64_t sparse_blocks) {
        return fi::sparse_logits_cuda_workspace_size(rows, sparse_blocks);
      },
      nb::arg("rows"), nb::arg("sparse_blocks"));
  m.def("topk_per_row", &topk_per_row, any("out"), any("logits"), nb::arg("k"),
        any("ks") = nb::none(), any("ke") = nb::none(), any("lengths") = nb::none(),
        nb::arg("next_n") = 1, nb::arg("sorted") = false, stream, workspace, threads);
  m.def("indexer_prefill", &indexer_prefill, any("out"), any("q_values"), any("q_scales"),
        any("k_values"), any("k_scales"), any("weights"), any("ks"), any("ke"), nb::arg("k"),
        nb::arg("sorted") = false, stream, workspace, threads, nb::arg("path") = "auto",
        nb::arg("min_row_keys") = 0, any("candidates") = nb::none(),
        nb::arg("candidate_block_size") = 0, nb::arg("candidate_vllm_compatible") = false,
        any("scores") = nb::none(), any("candidate_source") = nb::none(),
        nb::arg("candidate_source_block_size") = 0, any("candidate_rows") = nb::none());
  m.def("cuda_prefill_path", &cuda_prefill_path, nb::arg("k"), nb::arg("path") = "auto",
        nb::arg("min_row_keys") = 0, nb::arg("num_keys") = 0);
  m.def("indexer_decode", &indexer_decode, any("out"), any("q_values"), any("q_scales"),
        any("cache"), any("weights"), any("context_lens"), any("block_table"), nb::arg("k"),
        nb::arg("sorted") = false, stream, workspace, threads, nb::arg("path") = "auto",
        any("candidates") = nb::none(), nb::arg("candidate_block_size") = 0,
        nb::arg("candidate_vllm_compatible") = false, any("scores") = nb::none(),
        any("candidate_source") = nb::none(), nb::arg("candidate_source_block_size") = 0,
        any("candidate_rows") = nb::none());

  fi::python::register_candidates(m);
  fi::python::register_dist(m);
  fi::python::register_planning(m);
  fi::python::register_query(m);

  m.def("topk_per_row_cpu_workspace_size", &fi::topk_per_row_cpu_workspace_size, nb::arg("k"),
        nb::arg("threads") = 0);
  m.def(
      "topk_per_row_cuda_workspace_size",
      [](int64_t rows, int64_t width, int k, int device) {
        size_t bytes = 0;
        ArgumentList::run_on(device,
                             [&] { bytes = fi::topk_per_row_cuda_workspace_size(rows, width, k); });
        return bytes;
      },
      nb::arg("rows"), nb::arg("width"), nb::arg("k"), nb::arg("device") = -1);
  m.def("indexer_cpu_workspace_size", &fi::indexer_cpu_workspace_size, nb::arg("k"),
        nb::arg("threads") = 0);
  m.def(
      "indexer_cuda_workspace_size",
      [](int k, int device, int64_t candidate_source, int candidate_source_block_size) {
        // A source layer's size depends on C and cb only: a shape-only view carries C.
        fi::IndexerOptions options;
        if (candidate_source > 0) {
          options.candidate_source = fi::CandidateOutput{
              fi::TensorView::contiguous(nullptr, fi::DType::kI32, {1, candidate_source},
                                         fi::Device::kCUDA),
              candidate_source_block_size};
        }
        size_t bytes = 0;
        ArgumentList::run_on(device, [&] { bytes = fi::indexer_cuda_workspace_size(k, options); });
        return bytes;
      },
      nb::arg("k"), nb::arg("device") = -1, nb::arg("candidate_source") = 0,
      nb::arg("candidate_source_block_size") = 0);
  m.def(
      "page_bytes",
      [](const std::string& format, int page_size, int head_dim) {
        return fi::PagedKCache::page_bytes(parse_format(format), page_size, head_dim);
      },
      nb::arg("format"), nb::arg("page_size"), nb::arg("head_dim"));
  m.def(
      "bytes_per_key",
      [](const std::string& format, int head_dim) {
        return fi::PagedKCache::bytes_per_key(parse_format(format), head_dim);
      },
      nb::arg("format"), nb::arg("head_dim"));
  m.def("build_info", &build_info);
  m.def("cuda_device_count", [] {
    nb::gil_scoped_release released;
    return fi::cuda_device_count();
  });
  m.def(
      "cuda_device_refusal",
      [](int device) {
        std::string reason;
        nb::gil_scoped_release released;
        return fi::cuda_device_runs_kernels(device, &reason) ? std::string() : reason;
      },
      nb::arg("device"));
}
