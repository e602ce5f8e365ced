// SPDX-License-Identifier: Apache-2.0
// Public candidate ops (flashindexer/candidates.h): validate, then run on the tensors' device.
#include "flashindexer/candidates.h"

#include "api/checks/scoring.h"
#include "api/checks/topk.h"
#include "api/dispatch.h"
#include "core/access.h"
#include "core/checks.h"
#include "cpu/candidates.h"
#include "cuda/candidates/candidates.h"

namespace flashindexer {
namespace {

bool is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

// The most positions per block (cb): blocks are request-local runs of positions, and a larger cb
// would make C * cb overflow the 32-bit column counts of the sparse metadata.
constexpr int kMaxBlockSize = 4096;

void check_block_size(ArgCheck& check, int block_size) {
  check.require(block_size >= 1 && block_size <= kMaxBlockSize, "block_size=", block_size,
                " is not supported, expected 1 <= block_size <= ", kMaxBlockSize);
}

void check_num_blocks(ArgCheck& check, const char* name, int64_t num_blocks) {
  check.require(
      num_blocks >= 1 && num_blocks <= kMaxCandidateBlocks, name, "=", num_blocks,
      " candidate blocks per row is not supported, expected 1 <= C <= ", kMaxCandidateBlocks);
}

// The bounds of `rows` op rows on `device`; `need_ke`: ke is required (every op but the remap).
void check_candidate_rows(ArgCheck& check, const CandidateRows& bounds, int64_t rows, Device device,
                          bool need_ke) {
  check.require(bounds.row_repeat >= 1, "row_repeat=", bounds.row_repeat, ", expected >= 1");
  if (!check.ok()) return;
  check.require(rows % bounds.row_repeat == 0, "the ", rows,
                " rows are not a multiple of row_repeat=", bounds.row_repeat);
  const int64_t bound_rows = rows / bounds.row_repeat;
  check.optional_tensor("ks", bounds.ks, {DType::kI32}, 1);
  if (bounds.ks.defined())
    check.dim("ks", bounds.ks, 0, bound_rows).on_device("ks", bounds.ks, device);
  if (need_ke || bounds.ke.defined()) {
    const int rank = bounds.ke.rank == 2 ? 2 : 1;
    check.tensor("ke", bounds.ke, {DType::kI32}, rank).on_device("ke", bounds.ke, device);
    if (check.ok()) {
      check.require(bounds.ke.numel() == bound_rows, "ke has shape ", shape_string(bounds.ke),
                    ", which describes ", bounds.ke.numel(), " bound rows, expected ", bound_rows,
                    " (", rows, " rows / row_repeat=", bounds.row_repeat, ")");
    }
  }
  if (!check.ok() || device != Device::kCPU) return;
  const std::vector<cpu::RowBound> values = cpu::candidate_row_bounds(bounds, rows);
  for (int64_t r = 0; r < bound_rows && check.ok(); ++r) {
    const cpu::RowBound& b = values[r * bounds.row_repeat];
    check.require(b.ks >= 0 && (!need_ke || b.ks <= b.ke), "bound row ", r, " has ks=", b.ks,
                  ", ke=", b.ke, need_ke ? ", expected 0 <= ks <= ke" : ", expected ks >= 0");
  }
}

void check_logits(ArgCheck& check, const TensorView& logits) {
  check.tensor("logits", logits, {DType::kF32}, 2);
  if (check.ok()) check.stride_at_least("logits", logits, 0, logits.shape[1]);
}

void check_candidates(ArgCheck& check, const TensorView& candidates, int64_t rows, Device device) {
  check.tensor("candidates", candidates, {DType::kI32}, 2)
      .dim("candidates", candidates, 0, rows)
      .on_device("candidates", candidates, device);
  if (check.ok()) check_num_blocks(check, "candidates.shape[1]", candidates.shape[1]);
}

// The sparse logits ops' own arguments: sparse_indices [rows, S] i32, end [rows] i32, logits
// [rows, >= S * SBK] f32, SBK 8 or 16; on the CPU, 0 <= end <= S * SBK. Returns S.
int64_t check_sparse_columns(ArgCheck& check, const TensorView& logits,
                             const TensorView& sparse_indices, const TensorView& end, int64_t rows,
                             int sparse_block, Device device) {
  check.require(sparse_block == 8 || sparse_block == 16, "sparse_block=", sparse_block,
                " is not supported, expected 8 or 16");
  check.tensor("sparse_indices", sparse_indices, {DType::kI32}, 2)
      .dim("sparse_indices", sparse_indices, 0, rows)
      .on_device("sparse_indices", sparse_indices, device)
      .tensor("end", end, {DType::kI32}, 1)
      .dim("end", end, 0, rows)
      .on_device("end", end, device);
  check_logits(check, logits);
  if (!check.ok()) return 0;
  const int64_t blocks = sparse_indices.shape[1];
  check.dim("logits", logits, 0, rows)
      .dim_at_least("logits", logits, 1, blocks * sparse_block)
      .on_device("logits", logits, device);
  if (!check.ok() || device != Device::kCPU) return blocks;
  for (int64_t t = 0; t < rows && check.ok(); ++t) {
    const int32_t valid = *element<int32_t>(end, t);
    check.require(valid >= 0 && valid <= blocks * sparse_block, "end[", t, "]=", valid,
                  ", expected 0 <= end <= S * sparse_block = ", blocks * sparse_block);
  }
  return blocks;
}

// On the CPU: the sparse blocks below end[t] name existing keys: first(t, index) is the first
// key (or position) of a block, `limit` how many there are, `what` names them.
template <typename First>
void check_sparse_keys(ArgCheck& check, const TensorView& sparse_indices, const TensorView& end,
                       int sparse_block, int64_t limit, const char* what, First&& first) {
  for (int64_t t = 0; t < sparse_indices.shape[0] && check.ok(); ++t) {
    const int64_t valid = *element<int32_t>(end, t);
    for (int64_t column = 0; column < valid && check.ok(); column += sparse_block) {
      const int32_t index = *element<int32_t>(sparse_indices, t, column / sparse_block);
      const int64_t key = first(t, index);
      const int64_t n = std::min<int64_t>(sparse_block, valid - column);
      check.require(key >= 0 && key + n <= limit, "sparse_indices[", t, ", ", column / sparse_block,
                    "]=", index, " names ", what, " [", key, ", ", key + n, "), outside the ",
                    limit, " there are");
    }
  }
}

}  // namespace

Status select_candidate_blocks(const TensorView& out, const TensorView& logits,
                               const CandidateRows& rows, int num_blocks, int block_size,
                               const RunOptions& options) {
  ArgCheck check("select_candidate_blocks");
  check_logits(check, logits);
  check_num_blocks(check, "num_blocks", num_blocks);
  check_block_size(check, block_size);
  if (!check.ok()) return check.status();
  const int64_t count = logits.shape[0];
  check.tensor("out", out, {DType::kI32}, 2)
      .dim("out", out, 0, count)
      .dim_at_least("out", out, 1, num_blocks)
      .on_device("out", out, logits.device);
  if (check.ok()) check.stride_at_least("out", out, 0, num_blocks);
  check_candidate_rows(check, rows, count, logits.device, true);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::select_candidate_blocks(out, logits, rows, num_blocks, block_size, options);
  }
  cpu::select_candidate_blocks(out, logits, cpu::candidate_row_bounds(rows, count), num_blocks,
                               block_size, cpu_threads(options));
  return Status::Ok();
}

size_t select_candidate_blocks_cuda_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                                   int block_size) {
  return cuda::select_candidate_blocks_workspace_size(rows, width, num_blocks, block_size);
}

Status apply_candidate_mask(const TensorView& logits, const CandidateRows& rows,
                            const TensorView& candidates, int block_size,
                            const RunOptions& options) {
  ArgCheck check("apply_candidate_mask");
  check_logits(check, logits);
  check_block_size(check, block_size);
  if (!check.ok()) return check.status();
  const int64_t count = logits.shape[0];
  check_candidates(check, candidates, count, logits.device);
  check_candidate_rows(check, rows, count, logits.device, true);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::apply_candidate_mask(logits, rows, candidates, block_size, options.cuda_stream);
  }
  cpu::apply_candidate_mask(logits, cpu::candidate_row_bounds(rows, count), candidates, block_size,
                            cpu_threads(options));
  return Status::Ok();
}

Status candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                              const CandidateRows& rows, const TensorView& candidates,
                              int block_size, int k, const CandidateTopKOptions& topk_options,
                              const RunOptions& options) {
  ArgCheck check("candidate_topk_per_row");
  check_logits(check, logits);
  check_block_size(check, block_size);
  if (!check.ok()) return check.status();
  const int64_t count = logits.shape[0];
  check_topk_output(check, out, count, k);
  check.on_device("out", out, logits.device);
  check_candidates(check, candidates, count, logits.device);
  check_candidate_rows(check, rows, count, logits.device, true);
  if (!check.ok()) return check.status();
  if (logits.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::candidate_topk_per_row(out, logits, rows, candidates, block_size, k,
                                        topk_options.sorted, topk_options.vllm_compatible, options);
  }
  cpu::candidate_topk_per_row(out, logits, cpu::candidate_row_bounds(rows, count), candidates,
                              block_size, k, topk_options.sorted, topk_options.vllm_compatible,
                              cpu_threads(options));
  return Status::Ok();
}

size_t candidate_topk_per_row_cuda_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                                  int block_size, int k) {
  return cuda::candidate_topk_per_row_workspace_size(rows, width, num_blocks, block_size, k);
}

Status candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                          const TensorView& candidates, const CandidateRows& rows,
                                          int block_size, int sparse_block,
                                          const RunOptions& options) {
  ArgCheck check("candidate_blocks_to_sparse_indices");
  check.require(sparse_block == 8 || sparse_block == 16, "sparse_block=", sparse_block,
                " is not supported, expected 8 or 16");
  check_block_size(check, block_size);
  if (!check.ok()) return check.status();
  check.require(block_size % sparse_block == 0, "block_size=", block_size,
                " is not a multiple of the sparse block ", sparse_block);
  if (!check.ok()) return check.status();
  const int ratio = block_size / sparse_block;
  check.require(ratio == 1 || ratio == 2, "block_size=", block_size, " is ", ratio,
                " sparse blocks of ", sparse_block, ", expected 1 or 2");
  check.tensor("candidates", candidates, {DType::kI32}, 2);
  if (!check.ok()) return check.status();
  const Device device = candidates.device;
  const int64_t count = candidates.shape[0];
  check_num_blocks(check, "candidates.shape[1]", candidates.shape[1]);
  check.require(is_power_of_two(candidates.shape[1]), "candidates has ", candidates.shape[1],
                " blocks per row, expected a power of two");
  check.tensor("sparse_indices", sparse_indices, {DType::kI32}, 2)
      .dim("sparse_indices", sparse_indices, 0, count)
      .dim("sparse_indices", sparse_indices, 1, candidates.shape[1] * ratio)
      .on_device("sparse_indices", sparse_indices, device)
      .tensor("end", end, {DType::kI32}, 1)
      .dim("end", end, 0, count)
      .on_device("end", end, device);
  if (check.ok()) {
    check.stride_at_least("sparse_indices", sparse_indices, 0, sparse_indices.shape[1]);
  }
  check_candidate_rows(check, rows, count, device, true);
  if (!check.ok()) return check.status();
  if (device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::candidate_blocks_to_sparse_indices(sparse_indices, end, candidates, rows,
                                                    block_size, sparse_block, options.cuda_stream);
  }
  cpu::candidate_blocks_to_sparse_indices(sparse_indices, end, candidates,
                                          cpu::candidate_row_bounds(rows, count), block_size,
                                          sparse_block, cpu_threads(options));
  return Status::Ok();
}

Status sparse_topk_remap(const TensorView& out, const TensorView& columns,
                         const TensorView& sparse_indices, const CandidateRows& rows,
                         int sparse_block, const RunOptions& options) {
  ArgCheck check("sparse_topk_remap");
  check.require(sparse_block == 8 || sparse_block == 16, "sparse_block=", sparse_block,
                " is not supported, expected 8 or 16");
  check.tensor("columns", columns, {DType::kI32}, 2);
  if (!check.ok()) return check.status();
  const Device device = columns.device;
  const int64_t count = columns.shape[0];
  check.tensor("out", out, {DType::kI32}, 2)
      .dim("out", out, 0, count)
      .dim("out", out, 1, columns.shape[1])
      .on_device("out", out, device)
      .tensor("sparse_indices", sparse_indices, {DType::kI32}, 2)
      .dim("sparse_indices", sparse_indices, 0, count)
      .dim_at_least("sparse_indices", sparse_indices, 1, 1)
      .on_device("sparse_indices", sparse_indices, device);
  if (check.ok()) check.stride_at_least("out", out, 0, out.shape[1]);
  check_candidate_rows(check, rows, count, device, false);
  if (!check.ok()) return check.status();
  if (device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::sparse_topk_remap(out, columns, sparse_indices, rows, sparse_block,
                                   options.cuda_stream);
  }
  cpu::sparse_topk_remap(out, columns, sparse_indices, cpu::candidate_row_bounds(rows, count),
                         sparse_block, cpu_threads(options));
  return Status::Ok();
}

Status sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                         const QuantizedTensor& keys, const TensorView& weights,
                         const TensorView& sparse_indices, const TensorView& end,
                         const CandidateRows& rows, int sparse_block,
                         const LogitsOptions& logits_options, const RunOptions& options) {
  ArgCheck check("sparse_mqa_logits");
  const ScoringDims dims = check_prefill_scoring(check, q, keys, weights, rows.ks, rows.ke, -1);
  if (!check.ok()) return check.status();
  const Device device = q.values.device;
  check.require(rows.row_repeat == 1, "row_repeat=", rows.row_repeat,
                " is not supported: one bound row per query row");
  check_sparse_columns(check, logits, sparse_indices, end, dims.rows, sparse_block, device);
  if (!check.ok()) return check.status();
  if (device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::sparse_mqa_logits(logits, q, keys, weights, sparse_indices, end, rows.ks,
                                   sparse_block, logits_options.clean, options);
  }
  const std::vector<cpu::RowBound> bounds = cpu::candidate_row_bounds(rows, dims.rows);
  check_sparse_keys(check, sparse_indices, end, sparse_block, keys.values.shape[0], "keys",
                    [&](int64_t t, int32_t index) {
                      return int64_t{index} * sparse_block + bounds[t].ks % sparse_block;
                    });
  if (!check.ok()) return check.status();
  cpu::sparse_mqa_logits(logits, q, keys, weights, sparse_indices, end, bounds, sparse_block,
                         logits_options.clean, cpu_threads(options));
  return Status::Ok();
}

Status paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                               const PagedKCache& cache, const TensorView& weights,
                               const TensorView& sparse_indices, const TensorView& end,
                               const TensorView& block_table, int sparse_block,
                               const LogitsOptions& logits_options, const RunOptions& options) {
  ArgCheck check("paged_sparse_mqa_logits");
  const ScoringDims dims = check_paged_operands(check, q, cache, weights, block_table);
  if (!check.ok()) return check.status();
  const Device device = q.values.device;
  check_sparse_columns(check, logits, sparse_indices, end, dims.rows, sparse_block, device);
  if (!check.ok()) return check.status();
  check.require(cache.page_size % sparse_block == 0, "cache.page_size=", cache.page_size,
                " is not a multiple of sparse_block=", sparse_block);
  if (!check.ok()) return check.status();
  if (device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::paged_sparse_mqa_logits(logits, q, cache, weights, sparse_indices, end,
                                         block_table, sparse_block, logits_options.clean, options);
  }
  const int64_t next_n = q.values.shape[1];
  const int64_t pages = block_table.shape[1];
  check_sparse_keys(check, sparse_indices, end, sparse_block, pages * cache.page_size,
                    "positions of the block table",
                    [&](int64_t, int32_t index) { return int64_t{index} * sparse_block; });
  // Every page a valid column reads is a page of the cache.
  for (int64_t t = 0; t < dims.rows && check.ok(); ++t) {
    const int64_t valid = *element<int32_t>(end, t);
    for (int64_t column = 0; column < valid && check.ok(); column += sparse_block) {
      const int64_t position =
          int64_t{*element<int32_t>(sparse_indices, t, column / sparse_block)} * sparse_block;
      const int32_t page = *element<int32_t>(block_table, t / next_n, position / cache.page_size);
      check.require(page >= 0 && page < cache.num_pages, "block_table[", t / next_n, ", ",
                    position / cache.page_size, "]=", page,
                    " is out of range, expected 0 <= page < ", cache.num_pages);
    }
  }
  if (!check.ok()) return check.status();
  cpu::paged_sparse_mqa_logits(logits, q, cache, weights, sparse_indices, end, block_table,
                               sparse_block, logits_options.clean, cpu_threads(options));
  return Status::Ok();
}

size_t sparse_logits_cuda_workspace_size(int64_t rows, int64_t sparse_blocks) {
  return cuda::sparse_logits_workspace_size(rows, sparse_blocks);
}

}  // namespace flashindexer
