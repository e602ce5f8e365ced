// SPDX-License-Identifier: Apache-2.0
// The planning tensor ops (flashindexer/planning.h), a chunk's row bounds and the decode lengths:
// validate shapes, dtypes and devices, then run on the tensors' device. On CPU tensors the host
// planner does the work (and checks the lengths); on CUDA tensors one kernel does
// (src/cuda/planning/), with the lengths unread here.
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "api/checks/planning.h"
#include "api/dispatch.h"
#include "core/access.h"
#include "cuda/planning/planning.h"
#include "flashindexer/planning.h"
#include "planning/planning.h"

namespace flashindexer {
namespace {

void check_rule(ArgCheck& check, const RowBoundsOptions& bounds, int next_n) {
  check.require(next_n >= 1, "next_n=", next_n, ", expected >= 1")
      .require(bounds.compress_ratio >= 1, "compress_ratio=", bounds.compress_ratio,
               ", expected >= 1")
      .require(bounds.dcp.ranks >= 1, "dcp.ranks=", bounds.dcp.ranks, ", expected >= 1")
      .require(bounds.dcp.interleave >= 1, "dcp.interleave=", bounds.dcp.interleave,
               ", expected >= 1");
  if (check.ok()) {
    check.require(bounds.dcp_rank >= 0 && bounds.dcp_rank < bounds.dcp.ranks,
                  "dcp_rank=", bounds.dcp_rank, ", expected 0 <= dcp_rank < ", bounds.dcp.ranks);
  }
}

// A 1-D i32/i64 host tensor's values (tensor() has checked unit stride).
std::vector<int64_t> host_lengths(const TensorView& view) {
  std::vector<int64_t> values(static_cast<size_t>(view.shape[0]));
  for (int64_t i = 0; i < view.shape[0]; ++i) {
    values[i] = view.dtype == DType::kI64 ? *element<int64_t>(view, i) : *element<int32_t>(view, i);
  }
  return values;
}

std::span<int32_t> host_span(const TensorView& view) {
  if (!view.defined()) return {};
  return {view.ptr<int32_t>(), static_cast<size_t>(view.shape[0])};
}

}  // namespace

Status build_prefill_row_bounds(const TensorView& ks, const TensorView& ke,
                                const TensorView& token_to_seq, const PrefillChunk& chunk,
                                const TensorView& seq_lens, const TensorView& query_lens,
                                const RowBoundsOptions& bounds, const RunOptions& options) {
  ArgCheck check("build_prefill_row_bounds");
  check_options(check, bounds);
  check.tensor("seq_lens", seq_lens, {DType::kI32, DType::kI64}, 1)
      .tensor("query_lens", query_lens, {DType::kI32, DType::kI64}, 1)
      .tensor("ks", ks, {DType::kI32}, 1)
      .tensor("ke", ke, {DType::kI32}, 1)
      .optional_tensor("token_to_seq", token_to_seq, {DType::kI32}, 1);
  if (!check.ok()) return check.status();
  check.dim("query_lens", query_lens, 0, seq_lens.shape[0])
      .on_device("query_lens", query_lens, seq_lens.device)
      .on_device("ks", ks, seq_lens.device)
      .on_device("ke", ke, seq_lens.device);
  if (token_to_seq.defined()) check.on_device("token_to_seq", token_to_seq, seq_lens.device);
  if (!check.ok()) return check.status();
  if (seq_lens.device != Device::kCUDA) {
    return build_prefill_row_bounds(host_span(ks), host_span(ke), host_span(token_to_seq), chunk,
                                    host_lengths(seq_lens), host_lengths(query_lens), bounds);
  }
  // The chunk's own ranges (its lengths live on the device): requests within the lengths, query
  // rows that ks and ke hold exactly.
  check_chunk_requests(check, chunk, seq_lens.shape[0]);
  check.require(chunk.query_begin >= 0 && chunk.query_begin <= chunk.query_end &&
                    chunk.query_end <= kMaxPlanningLength,
                "chunk query rows [", chunk.query_begin, ", ", chunk.query_end,
                ") are not a range within [0, ", kMaxPlanningLength, "]");
  if (!check.ok()) return check.status();
  check.dim("ks", ks, 0, chunk.query_end - chunk.query_begin)
      .dim("ke", ke, 0, chunk.query_end - chunk.query_begin);
  if (!check.ok()) return check.status();
  if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
  const cuda::ChunkRows rows{chunk.request_begin, chunk.request_end, chunk.query_begin};
  return cuda::prefill_row_bounds(ks, ke, token_to_seq, rows, seq_lens, query_lens,
                                  planning::decode_rule(bounds), options.cuda_stream);
}

Status decode_flat_lens(const TensorView& row_lens, const TensorView& row_to_request,
                        const TensorView& seq_lens, const TensorView& query_lens, int next_n,
                        const RowBoundsOptions& bounds, const RunOptions& options) {
  ArgCheck check("decode_flat_lens");
  check_rule(check, bounds, next_n);
  check.tensor("seq_lens", seq_lens, {DType::kI32, DType::kI64}, 1)
      .tensor("query_lens", query_lens, {DType::kI32, DType::kI64}, 1)
      .tensor("row_lens", row_lens, {DType::kI32}, 1)
      .optional_tensor("row_to_request", row_to_request, {DType::kI32}, 1);
  if (!check.ok()) return check.status();
  const int64_t rows = row_lens.shape[0];
  const int64_t requests = seq_lens.shape[0];
  check.dim("query_lens", query_lens, 0, requests)
      .require(rows + requests <= std::numeric_limits<int32_t>::max(), "row_lens has ", rows,
               " entries, too many for i32 ids")
      .on_device("query_lens", query_lens, seq_lens.device)
      .on_device("row_lens", row_lens, seq_lens.device);
  if (row_to_request.defined()) {
    check.dim("row_to_request", row_to_request, 0, rows)
        .on_device("row_to_request", row_to_request, seq_lens.device);
  }
  if (!check.ok()) return check.status();
  if (seq_lens.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::decode_flat_lens(row_lens, row_to_request, seq_lens, query_lens, next_n,
                                  planning::decode_rule(bounds), options.cuda_stream);
  }
  return decode_flat_lens(host_span(row_lens), host_span(row_to_request), host_lengths(seq_lens),
                          host_lengths(query_lens), next_n, bounds);
}

Status decode_native_lens(const TensorView& lens, const TensorView& seq_lens, int next_n,
                          const RowBoundsOptions& bounds, const RunOptions& options) {
  ArgCheck check("decode_native_lens");
  check_rule(check, bounds, next_n);
  check.tensor("seq_lens", seq_lens, {DType::kI32, DType::kI64}, 1)
      .tensor("lens", lens, {DType::kI32}, 2);
  if (!check.ok()) return check.status();
  const int64_t requests = seq_lens.shape[0];
  check.dim("lens", lens, 0, requests)
      .dim("lens", lens, 1, next_n)
      .stride_at_least("lens", lens, 0, next_n)
      .on_device("lens", lens, seq_lens.device);
  if (!check.ok()) return check.status();
  if (seq_lens.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::decode_native_lens(lens, seq_lens, next_n, planning::decode_rule(bounds),
                                    options.cuda_stream);
  }
  std::vector<int32_t> values(static_cast<size_t>(requests * next_n));
  const Status status = decode_native_lens(values, host_lengths(seq_lens), next_n, bounds);
  if (!status.ok()) return status;
  for (int64_t b = 0; b < requests; ++b) {
    for (int j = 0; j < next_n; ++j) *element<int32_t>(lens, b, j) = values[b * next_n + j];
  }
  return Status::Ok();
}

}  // namespace flashindexer
