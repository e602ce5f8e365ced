// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: query quantization with optional RoPE, and insert_k_cache with the key's
// RoPE. The RoPE arguments arrive as a style name ("none", "neox", "interleaved"), a dims name
// ("first64", "last64"), the cos/sin cache and the positions (None when the style is "none").
#include "query_bindings.h"

#include <nanobind/stl/string.h>

#include <string>

#include "flashindexer/flashindexer.h"
#include "tensor_args.h"

namespace flashindexer::python {
namespace {

RopeStyle parse_style(const std::string& style) {
  if (style == "none") return RopeStyle::kNone;
  if (style == "neox") return RopeStyle::kNeox;
  if (style == "interleaved") return RopeStyle::kInterleaved;
  raise(PyExc_ValueError,
        "rope style is \"" + style + "\", expected \"none\", \"neox\" or \"interleaved\"");
}

RopeDims parse_dims(const std::string& dims) {
  if (dims == "first64") return RopeDims::kFirst64;
  if (dims == "last64") return RopeDims::kLast64;
  if (dims.empty()) return RopeDims::kUnspecified;
  raise(PyExc_ValueError, "rope dims is \"" + dims + "\", expected \"first64\" or \"last64\"");
}

RopeOptions rope_options(ArgumentList& args, const std::string& style, const std::string& dims,
                         nb::handle cos_sin_cache, nb::handle positions) {
  RopeOptions rope;
  rope.style = parse_style(style);
  rope.dims = parse_dims(dims);
  if (rope.enabled()) {
    rope.cos_sin_cache = args.input("rope.cos_sin_cache", cos_sin_cache);
    rope.positions = args.input("rope.positions", positions);
  }
  return rope;
}

void quantize_query_fp8(nb::handle values, nb::handle weights_out, nb::handle q, nb::handle weights,
                        float eps, float weight_scale, const std::string& style,
                        const std::string& dims, nb::handle cos_sin_cache, nb::handle positions,
                        uintptr_t stream, int cpu_threads) {
  ArgumentList args("quantize_query_fp8");
  const TensorView q_view = args.input("q", q);
  const TensorView weights_view = args.input("weights", weights);
  const TensorView values_view = args.output("values", values, DType::kE4M3);
  const TensorView weights_out_view = args.output("weights_out", weights_out);
  QueryQuantOptions quant;
  quant.eps = eps;
  quant.weight_scale = weight_scale;
  quant.rope = rope_options(args, style, dims, cos_sin_cache, positions);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return flashindexer::quantize_query_fp8(values_view, weights_out_view, q_view, weights_view,
                                            quant, options);
  });
}

void quantize_query_mxfp4(nb::handle values, nb::handle scales, nb::handle weights_out,
                          nb::handle q, nb::handle weights, float weight_scale,
                          const std::string& style, const std::string& dims,
                          nb::handle cos_sin_cache, nb::handle positions, uintptr_t stream,
                          int cpu_threads) {
  ArgumentList args("quantize_query_mxfp4");
  const TensorView q_view = args.input("q", q);
  const TensorView weights_view = args.input("weights", weights);
  const TensorView values_view = args.output("values", values, DType::kE2M1x2);
  const TensorView scales_view = args.output("scales", scales, DType::kUE8M0);
  const TensorView weights_out_view = args.output("weights_out", weights_out);
  QueryQuantOptions quant;
  quant.weight_scale = weight_scale;
  quant.rope = rope_options(args, style, dims, cos_sin_cache, positions);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return flashindexer::quantize_query_mxfp4(values_view, scales_view, weights_out_view, q_view,
                                              weights_view, quant, options);
  });
}

void insert_k_cache_rope(nb::handle cache, nb::handle keys, nb::handle slot_mapping,
                         const std::string& style, const std::string& dims,
                         nb::handle cos_sin_cache, nb::handle positions, uintptr_t stream,
                         int cpu_threads) {
  ArgumentList args("insert_k_cache");
  const TensorView keys_view = args.input("keys", keys);
  const TensorView slots_view = args.input("slot_mapping", slot_mapping);
  const PagedKCache cache_view = args.cache("cache", cache, /*writable=*/true);
  KeyInsertOptions insert;
  insert.rope = rope_options(args, style, dims, cos_sin_cache, positions);
  const RunOptions options = args.options(stream, nb::none(), cpu_threads);
  args.run([&] {
    return flashindexer::insert_k_cache(cache_view, keys_view, slots_view, insert, options);
  });
}

}  // namespace

void register_query(nb::module_& m) {
  const auto stream = nb::arg("stream") = 0;
  const auto threads = nb::arg("cpu_threads") = 0;
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.def("quantize_query_fp8", &quantize_query_fp8, any("values"), any("weights_out"), any("q"),
        any("weights"), nb::arg("eps"), nb::arg("weight_scale") = 0.0f,
        nb::arg("rope_style") = "none", nb::arg("rope_dims") = "",
        any("cos_sin_cache") = nb::none(), any("positions") = nb::none(), stream, threads);
  m.def("quantize_query_mxfp4", &quantize_query_mxfp4, any("values"), any("scales"),
        any("weights_out"), any("q"), any("weights"), nb::arg("weight_scale") = 0.0f,
        nb::arg("rope_style") = "none", nb::arg("rope_dims") = "",
        any("cos_sin_cache") = nb::none(), any("positions") = nb::none(), stream, threads);
  m.def("insert_k_cache_rope", &insert_k_cache_rope, any("cache"), any("keys"), any("slot_mapping"),
        nb::arg("rope_style"), nb::arg("rope_dims"), any("cos_sin_cache"), any("positions"), stream,
        threads);
  m.def("default_query_weight_scale", &default_query_weight_scale, nb::arg("head_dim"),
        nb::arg("heads"));
}

}  // namespace flashindexer::python
