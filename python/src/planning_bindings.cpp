// SPDX-License-Identifier: Apache-2.0
// flashindexer._C: step planning (flashindexer/planning.h) over NumPy arrays on the host.
// Lengths come in as C-contiguous int64 arrays and results go into int32 / int64 arrays the
// Python package allocates (flashindexer/planning.py converts and shapes them); nothing here
// allocates but the chunk list, which comes back as an int64 [chunks, 8] array. The decode
// lengths also come as tensor ops over any DLPack tensor (CPU or CUDA, graph-capturable there).
#include "planning_bindings.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
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

nb::ndarray<nb::numpy, int64_t, nb::ndim<2>> plan_prefill_chunks_binding(
    Lengths key_lens, Lengths query_lens, int64_t workspace_keys, int64_t max_logits_bytes,
    int64_t min_split_key_len) {
  std::vector<PrefillChunk> chunks;
  raise_if_error(plan_prefill_chunks(chunks, view(key_lens), view(query_lens),
                                     {workspace_keys, max_logits_bytes, min_split_key_len}));
  auto* rows = new std::vector<int64_t>();
  rows->reserve(chunks.size() * kChunkFields);
  for (const PrefillChunk& c : chunks) {
    rows->insert(rows->end(), {c.request_begin, c.request_end, c.query_begin, c.query_end,
                               c.token_begin, c.token_end, c.num_keys, c.gathers_keys ? 1 : 0});
  }
  nb::capsule owner(rows, [](void* p) noexcept { delete static_cast<std::vector<int64_t>*>(p); });
  return nb::ndarray<nb::numpy, int64_t, nb::ndim<2>>(rows->data(), {chunks.size(), kChunkFields},
                                                      owner);
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
  m.def("resliced_block_table_cols", &resliced_block_table_cols_binding);
  m.def("reslice_block_table", &reslice_block_table_binding);
  const auto any = [](const char* name) { return nb::arg(name).none(); };
  m.def("decode_flat_lens_tensor", &decode_flat_lens_tensor_binding, any("row_lens"),
        any("row_to_request"), any("seq_lens"), any("query_lens"), nb::arg("next_n"),
        nb::arg("compress_ratio"), nb::arg("dcp_ranks"), nb::arg("dcp_interleave"),
        nb::arg("dcp_rank"), nb::arg("stream"));
  m.def("decode_native_lens_tensor", &decode_native_lens_tensor_binding, any("lens"),
        any("seq_lens"), nb::arg("next_n"), nb::arg("compress_ratio"), nb::arg("dcp_ranks"),
        nb::arg("dcp_interleave"), nb::arg("dcp_rank"), nb::arg("stream"));
}

}  // namespace flashindexer::python
