// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: step planning (flashindexer/planning.h) over NumPy arrays on the host.
// Lengths come in as C-contiguous int64 arrays and results go into int32 / int64 arrays the
// Python package allocates (flashindexer/planning.py converts and shapes them); nothing here
// allocates but the chunk list, which comes back as an int64 [chunks, 8] array, and plan_step's
// results, which are new NumPy arrays but for the caller's staging buffers. A chunk's row bounds
// and the decode lengths also come as tensor ops over any DLPack tensor (CPU or CUDA,
// graph-capturable there).
#include "planning_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "flashindexer/planning.h"
#include "tensor_args.h"

namespace flashindexer::python {
namespace {

namespace nb = nanobind;

using Lengths = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int32Out = nb::ndarray<int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64Out = nb::ndarray<int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using Table = nb::ndarray<const int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using TableOut = nb::ndarray<int32_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;

std::span<const int64_t> view(const Lengths& lengths) { return {lengths.data(), lengths.shape(0)}; }
std::span<int32_t> view(Int32Out& out) { return {out.data(), out.shape(0)}; }

// The columns of a chunk row, in the order of PrefillChunk's fields.
constexpr int kChunkFields = 8;

RowBoundsOptions bounds_options(int compress_ratio, int dcp_ranks, int dcp_interleave,
                                int dcp_rank) {
  return {compress_ratio, {dcp_ranks, dcp_interleave}, dcp_rank};
}

// A NumPy array that owns `values`.
template <typename T, size_t Rank>
nb::ndarray<nb::numpy, T, nb::ndim<Rank>> owned_array(std::vector<T>* values,
                                                      const size_t (&shape)[Rank]) {
  nb::capsule owner(values, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T, nb::ndim<Rank>>(values->data(), Rank, shape, owner);
}

// The chunks as an int64 [chunks, kChunkFields] array, one row a chunk.
nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> chunk_array(const std::vector<PrefillChunk>& chunks) {
  auto* rows = new std::vector<int64_t>();
  rows->reserve(chunks.size() * kChunkFields);
  for (const PrefillChunk& c : chunks) {
    rows->insert(rows->end(), {c.request_begin, c.request_end, c.query_begin, c.query_end,
                               c.token_begin, c.token_end, c.num_keys, c.gathers_keys ? 1 : 0});
  }
  return owned_array(rows, {chunks.size(), size_t{kChunkFields}});
}

nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> plan_prefill_chunks_binding(
    Lengths key_lens, Lengths query_lens, int64_t workspace_keys, int64_t max_logits_bytes,
    int64_t min_split_key_len) {
  std::vector<PrefillChunk> chunks;
  raise_if_error(plan_prefill_chunks(chunks, view(key_lens), view(query_lens),
                                     {workspace_keys, max_logits_bytes, min_split_key_len}));
  return chunk_array(chunks);
}

PrefillChunk chunk_from_row(Lengths row) {
  if (row.shape(0) != kChunkFields) {
    raise(PyExc_ValueError, "prefill_row_bounds: chunk must have 8 fields");
  }
  const int64_t* f = row.data();
  return {static_cast<int32_t>(f[0]),
          static_cast<int32_t>(f[1]),
          f[2],
          f[3],
          f[4],
          f[5],
          f[6],
          f[7] != 0};
}

int64_t chunk_workspace_keys_binding(Lengths chunk, Lengths seq_lens, int compress_ratio,
                                     int dcp_ranks, int dcp_interleave, int dcp_rank) {
  return chunk_workspace_keys(chunk_from_row(chunk), view(seq_lens),
                              bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank));
}

void build_prefill_row_bounds_binding(Int32Out ks, Int32Out ke, Int32Out token_to_seq,
                                      Lengths chunk, Lengths seq_lens, Lengths query_lens,
                                      int compress_ratio, int dcp_ranks, int dcp_interleave,
                                      int dcp_rank) {
  raise_if_error(build_prefill_row_bounds(
      view(ks), view(ke), view(token_to_seq), chunk_from_row(chunk), view(seq_lens),
      view(query_lens), bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank)));
}

// chunks: the chunks' fields, kChunkFields a chunk, flattened (as plan_prefill_chunks returns
// them, one row a chunk).
void build_prefill_step_row_bounds_binding(Int32Out ks, Int32Out ke, Lengths chunks,
                                           Lengths seq_lens, Lengths query_lens, int compress_ratio,
                                           int dcp_ranks, int dcp_interleave, int dcp_rank) {
  if (chunks.shape(0) % kChunkFields != 0) {
    raise(PyExc_ValueError, "prefill_step_row_bounds: chunks must have 8 fields each");
  }
  std::vector<PrefillChunk> list;
  const int64_t* f = chunks.data();
  for (size_t at = 0; at < chunks.shape(0); at += kChunkFields, f += kChunkFields) {
    list.push_back({static_cast<int32_t>(f[0]), static_cast<int32_t>(f[1]), f[2], f[3], f[4], f[5],
                    f[6], f[7] != 0});
  }
  raise_if_error(build_prefill_step_row_bounds(
      view(ks), view(ke), list, view(seq_lens), view(query_lens),
      bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank)));
}

void decode_flat_lens_binding(Int32Out row_lens, Int32Out row_to_request, Lengths seq_lens,
                              Lengths query_lens, int next_n, int compress_ratio, int dcp_ranks,
                              int dcp_interleave, int dcp_rank) {
  raise_if_error(decode_flat_lens(
      view(row_lens), view(row_to_request), view(seq_lens), view(query_lens), next_n,
      bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank)));
}

void decode_native_lens_binding(Int32Out lens, Lengths seq_lens, int next_n, int compress_ratio,
                                int dcp_ranks, int dcp_interleave, int dcp_rank) {
  raise_if_error(
      decode_native_lens(view(lens), view(seq_lens), next_n,
                         bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank)));
}

void decode_pack_map_binding(Int32Out packed_row_of_token, Int32Out token_of_packed_row,
                             Lengths query_lens, int max_d) {
  raise_if_error(decode_pack_map(view(packed_row_of_token), view(token_of_packed_row),
                                 view(query_lens), max_d));
}

std::vector<int64_t> decode_row_ranges_binding(int64_t rows, int64_t width, int64_t budget_bytes) {
  std::vector<RowRange> ranges;
  raise_if_error(decode_row_ranges(ranges, rows, width, budget_bytes));
  std::vector<int64_t> bounds;
  for (const RowRange& range : ranges) bounds.insert(bounds.end(), {range.begin, range.end});
  return bounds;
}

// plan_step's arrays are read through the buffer protocol and its new arrays made by
// numpy.empty, not through nanobind's ndarray caster: the caster asks NumPy for a DLPack capsule
// and exports through numpy.asarray over a foreign object, which for the ten arrays of one step
// cost more than planning a step without prefill.

// A C-contiguous array of signed integers T (a NumPy array, or anything with the buffer
// protocol), held for one call.
template <typename T>
class BufferSpan {
 public:
  BufferSpan() = default;
  ~BufferSpan() {
    if (held_) PyBuffer_Release(&buffer_);
  }
  BufferSpan(const BufferSpan&) = delete;
  BufferSpan& operator=(const BufferSpan&) = delete;

  // Whether `object` is such an array of the given rank (and writable if asked); holds it if so.
  bool hold(nb::handle object, bool writable, int rank = 1) {
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(object.ptr(), &buffer_, flags) != 0) {
      PyErr_Clear();
      return false;
    }
    held_ = buffer_.ndim == rank && buffer_.itemsize == sizeof(T) && signed_integer(buffer_.format);
    if (!held_) PyBuffer_Release(&buffer_);
    return held_;
  }

  std::span<T> span() const {
    return {static_cast<T*>(buffer_.buf), static_cast<size_t>(buffer_.len / buffer_.itemsize)};
  }

 private:
  // A signed integer struct code in native byte order (the item size is checked apart).
  static bool signed_integer(const char* format) {
    if (format == nullptr) return false;
    const bool little_endian = std::endian::native == std::endian::little;
    if (*format == '@' || *format == '=' || (*format == '<' && little_endian)) ++format;
    return format[0] != '\0' && std::strchr("bhilq", format[0]) != nullptr && format[1] == '\0';
  }

  Py_buffer buffer_{};
  bool held_ = false;
};

// NumPy's module, looked up once and kept for the life of the process (never released: a call may
// need it until the interpreter shuts down).
nb::handle numpy() {
  static const nb::handle module = nb::module_::import_("numpy").release();
  return module;
}

// The lengths of `object`, an int64 1-D C-contiguous array as it is, else any integer array-like
// converted as flashindexer.planning converts lengths for the other calls (flattened to int64).
void hold_lengths(BufferSpan<const int64_t>& lengths, nb::handle object, const char* name) {
  if (lengths.hold(object, false)) return;
  const nb::object array = numpy().attr("asarray")(object).attr("reshape")(-1);
  const nb::object converted = numpy().attr("ascontiguousarray")(array, numpy().attr("int64"));
  if (!lengths.hold(converted, false)) {
    raise(PyExc_TypeError, std::string("plan_step: ") + name + " is not an integer array");
  }
}

void hold_rows(BufferSpan<int32_t>& rows, nb::handle object, const char* name) {
  if (!rows.hold(object, true)) {
    raise(PyExc_TypeError, std::string("plan_step: out ") + name +
                               " must be a writable C-contiguous 1-D int32 array");
  }
}

// A new NumPy array of T (int32 or int64) of `rows` rows of `cols` entries (cols 0: 1-D), and
// its entries.
template <typename T>
nb::object new_array(std::span<T>& values, size_t rows, size_t cols = 0) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  static const nb::handle empty = nb::object(numpy().attr("empty")).release();
  static const nb::handle dtype =
      nb::object(numpy().attr(sizeof(T) == 4 ? "int32" : "int64")).release();
  nb::object array = cols == 0 ? empty(rows, dtype) : empty(nb::make_tuple(rows, cols), dtype);
  BufferSpan<T> buffer;
  if (!buffer.hold(array, true, cols == 0 ? 1 : 2)) {
    raise(PyExc_RuntimeError, "plan_step: numpy.empty gave an array of an unexpected layout");
  }
  values = buffer.span();  // stays valid while `array` lives: its storage never moves
  return array;
}

// ks / ke: buffers of at least the chunks' rows, or None for new ones of sum(prefill_query_lens)
// rows (a bound on the chunks' rows). decode_rows < 0: one decode row per token. Returns the
// fields of flashindexer.planning.StepPlan: (chunks, ks, ke, offsets, row_lens, row_to_request,
// ranges), ks and ke the views of the step's rows.
nb::tuple plan_step_binding(nb::handle ks_object, nb::handle ke_object,
                            nb::handle prefill_seq_object, nb::handle prefill_query_object,
                            nb::handle decode_seq_object, nb::handle decode_query_object,
                            int64_t workspace_keys, int64_t max_logits_bytes,
                            int64_t min_split_key_len, int next_n, int compress_ratio,
                            int dcp_ranks, int dcp_interleave, int dcp_rank, int64_t decode_rows,
                            int64_t decode_width, int64_t decode_logits_bytes) {
  BufferSpan<const int64_t> prefill_seq_lens, prefill_query_lens, decode_seq_lens,
      decode_query_lens;
  hold_lengths(prefill_seq_lens, prefill_seq_object, "prefill_seq_lens");
  hold_lengths(prefill_query_lens, prefill_query_object, "prefill_query_lens");
  hold_lengths(decode_seq_lens, decode_seq_object, "decode_seq_lens");
  hold_lengths(decode_query_lens, decode_query_object, "decode_query_lens");
  const StepLengths lengths{prefill_seq_lens.span(), prefill_query_lens.span(),
                            decode_seq_lens.span(), decode_query_lens.span()};
  // A sum here only sizes a buffer. Entries are clamped to the lengths plan_step accepts (it
  // rejects the others before it writes a row), so bad lengths cannot ask for a huge buffer.
  const auto sum = [](std::span<const int64_t> values) {
    int64_t total = 0;
    for (const int64_t value : values) {
      total += std::clamp<int64_t>(value, 0, std::numeric_limits<int32_t>::max());
    }
    return total;
  };
  const int64_t rows = decode_rows >= 0 ? decode_rows : sum(lengths.decode_query_lens);
  if (rows > std::numeric_limits<int32_t>::max()) {
    raise(PyExc_ValueError,
          "plan_step: decode_rows=" + std::to_string(rows) + ", too many for i32 ids");
  }

  nb::object ks_array, ke_array;
  std::span<int32_t> ks, ke;
  BufferSpan<int32_t> ks_out, ke_out;
  if (ks_object.is_none() && ke_object.is_none()) {
    const auto prefill_rows = static_cast<size_t>(sum(lengths.prefill_query_lens));
    ks_array = new_array(ks, prefill_rows);
    ke_array = new_array(ke, prefill_rows);
  } else {
    hold_rows(ks_out, ks_object, "ks");
    hold_rows(ke_out, ke_object, "ke");
    ks_array = nb::borrow(ks_object);
    ke_array = nb::borrow(ke_object);
    ks = ks_out.span();
    ke = ke_out.span();
  }
  std::span<int32_t> row_lens, row_to_request;
  nb::object row_lens_array = new_array(row_lens, static_cast<size_t>(rows));
  nb::object row_to_request_array = new_array(row_to_request, static_cast<size_t>(rows));

  StepPlanOptions options;
  options.budget = {workspace_keys, max_logits_bytes, min_split_key_len};
  options.bounds = bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank);
  options.next_n = next_n;
  options.decode_width = decode_width;
  options.decode_logits_bytes = decode_logits_bytes;
  // One plan per thread, so that its vectors are allocated once, not on every step.
  thread_local StepPlan plan;
  raise_if_error(plan_step(plan, ks, ke, row_lens, row_to_request, lengths, options));

  std::span<int64_t> fields;
  nb::object chunks = new_array(fields, plan.chunks.size(), kChunkFields);
  auto field = fields.begin();
  for (const PrefillChunk& c : plan.chunks) {
    for (const int64_t value :
         {int64_t{c.request_begin}, int64_t{c.request_end}, c.query_begin, c.query_end,
          c.token_begin, c.token_end, c.num_keys, int64_t{c.gathers_keys ? 1 : 0}}) {
      *field++ = value;
    }
  }
  std::span<int64_t> offsets;
  nb::object offsets_array = new_array(offsets, plan.chunk_row_offsets.size());
  std::copy(plan.chunk_row_offsets.begin(), plan.chunk_row_offsets.end(), offsets.begin());
  nb::list ranges;
  for (const RowRange& range : plan.decode_ranges) {
    ranges.append(nb::make_tuple(range.begin, range.end));
  }
  const nb::slice step_rows(int64_t{0}, plan.chunk_row_offsets.back(), int64_t{1});
  return nb::make_tuple(chunks, ks_array[step_rows], ke_array[step_rows], offsets_array,
                        row_lens_array, row_to_request_array, ranges);
}

int64_t resliced_block_table_cols_binding(int64_t cols, int allocation_page_size,
                                          int kernel_page_size) {
  const int64_t kernel_cols =
      resliced_block_table_cols(cols, allocation_page_size, kernel_page_size);
  if (kernel_cols < 0) {
    raise(PyExc_ValueError,
          "reslice_block_table: allocation_page_size=" + std::to_string(allocation_page_size) +
              " and kernel_page_size=" + std::to_string(kernel_page_size) +
              ": expected positive sizes, one a whole multiple of the other");
  }
  return kernel_cols;
}

void reslice_block_table_binding(TableOut kernel_table, Table block_table, int allocation_page_size,
                                 int kernel_page_size, Lengths key_lens) {
  const int64_t rows = static_cast<int64_t>(block_table.shape(0));
  const int64_t cols = static_cast<int64_t>(block_table.shape(1));
  raise_if_error(reslice_block_table({kernel_table.data(), kernel_table.size()},
                                     {block_table.data(), block_table.size()}, rows, cols,
                                     allocation_page_size, kernel_page_size, view(key_lens)));
}

void decode_flat_lens_tensor_binding(nb::handle row_lens, nb::handle row_to_request,
                                     nb::handle seq_lens, nb::handle query_lens, int next_n,
                                     int compress_ratio, int dcp_ranks, int dcp_interleave,
                                     int dcp_rank, uintptr_t stream) {
  ArgumentList args("decode_flat_lens");
  const TensorView seq_view = args.input("seq_lens", seq_lens);
  const TensorView query_view = args.input("query_lens", query_lens);
  const TensorView lens_view = args.output("row_lens", row_lens);
  const TensorView requests_view = args.output("row_to_request", row_to_request);
  const RunOptions options = args.options(stream, nb::none(), 0);
  const RowBoundsOptions bounds =
      bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank);
  args.run([&] {
    return decode_flat_lens(lens_view, requests_view, seq_view, query_view, next_n, bounds,
                            options);
  });
}

void build_prefill_row_bounds_tensor_binding(nb::handle ks, nb::handle ke, nb::handle token_to_seq,
                                             Lengths chunk, nb::handle seq_lens,
                                             nb::handle query_lens, int compress_ratio,
                                             int dcp_ranks, int dcp_interleave, int dcp_rank,
                                             uintptr_t stream) {
  ArgumentList args("build_prefill_row_bounds");
  const PrefillChunk parsed = chunk_from_row(chunk);
  const TensorView seq_view = args.input("seq_lens", seq_lens);
  const TensorView query_view = args.input("query_lens", query_lens);
  const TensorView ks_view = args.output("ks", ks);
  const TensorView ke_view = args.output("ke", ke);
  const TensorView tokens_view = args.output("token_to_seq", token_to_seq);
  const RunOptions options = args.options(stream, nb::none(), 0);
  const RowBoundsOptions bounds =
      bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank);
  args.run([&] {
    return build_prefill_row_bounds(ks_view, ke_view, tokens_view, parsed, seq_view, query_view,
                                    bounds, options);
  });
}

void decode_native_lens_tensor_binding(nb::handle lens, nb::handle seq_lens, int next_n,
                                       int compress_ratio, int dcp_ranks, int dcp_interleave,
                                       int dcp_rank, uintptr_t stream) {
  ArgumentList args("decode_native_lens");
  const TensorView seq_view = args.input("seq_lens", seq_lens);
  const TensorView lens_view = args.output("lens", lens);
  const RunOptions options = args.options(stream, nb::none(), 0);
  const RowBoundsOptions bounds =
      bounds_options(compress_ratio, dcp_ranks, dcp_interleave, dcp_rank);
  args.run([&] { return decode_native_lens(lens_view, seq_view, next_n, bounds, options); });
}

}  // namespace

void register_planning(nb::module_& m) {
  m.def("plan_prefill_chunks", &plan_prefill_chunks_binding, nb::arg("key_lens"),
        nb::arg("query_lens"), nb::arg("workspace_keys"), nb::arg("max_logits_bytes"),
        nb::arg("min_split_key_len"));
  m.def("chunk_workspace_keys", &chunk_workspace_keys_binding);
  m.def("build_prefill_row_bounds", &build_prefill_row_bounds_binding);
  m.def("build_prefill_step_row_bounds", &build_prefill_step_row_bounds_binding);
  m.def("decode_flat_lens", &decode_flat_lens_binding);
  m.def("decode_native_lens", &decode_native_lens_binding);
  m.def("decode_pack_map", &decode_pack_map_binding);
  m.def("decode_row_ranges", &decode_row_ranges_binding);
  m.def("plan_step", &plan_step_binding, nb::arg("ks").none(), nb::arg("ke").none(),
        nb::arg("prefill_seq_lens"), nb::arg("prefill_query_lens"), nb::arg("decode_seq_lens"),
        nb::arg("decode_query_lens"), nb::arg("workspace_keys"), nb::arg("max_logits_bytes"),
        nb::arg("min_split_key_len"), nb::arg("next_n"), nb::arg("compress_ratio"),
        nb::arg("dcp_ranks"), nb::arg("dcp_interleave"), nb::arg("dcp_rank"),
        nb::arg("decode_rows"), nb::arg("decode_width"), nb::arg("decode_logits_bytes"));
  m.def("resliced_block_table_cols", &resliced_block_table_cols_binding);
  m.def("reslice_block_table", &reslice_block_table_binding);
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.def("decode_flat_lens_tensor", &decode_flat_lens_tensor_binding, any("row_lens"),
        any("row_to_request"), any("seq_lens"), any("query_lens"), nb::arg("next_n"),
        nb::arg("compress_ratio"), nb::arg("dcp_ranks"), nb::arg("dcp_interleave"),
        nb::arg("dcp_rank"), nb::arg("stream"));
  m.def("build_prefill_row_bounds_tensor", &build_prefill_row_bounds_tensor_binding, any("ks"),
        any("ke"), any("token_to_seq"), nb::arg("chunk"), any("seq_lens"), any("query_lens"),
        nb::arg("compress_ratio"), nb::arg("dcp_ranks"), nb::arg("dcp_interleave"),
        nb::arg("dcp_rank"), nb::arg("stream"));
  m.def("decode_native_lens_tensor", &decode_native_lens_tensor_binding, any("lens"),
        any("seq_lens"), nb::arg("next_n"), nb::arg("compress_ratio"), nb::arg("dcp_ranks"),
        nb::arg("dcp_interleave"), nb::arg("dcp_rank"), nb::arg("stream"));
}

}  // namespace flashindexer::python
