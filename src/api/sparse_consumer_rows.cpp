// SPDX-License-Identifier: Apache-2.0
// build_sparse_consumer_rows_prefill / _decode and their size (flashindexer/candidates.h): the
// rows metadata of a DeepSeek-V4.1 consumer step's sparse path, built once for every consumer
// layer of the step. CUDA only; the checks here are the shapes, dtypes and devices (the values
// live on the GPU).
#include "api/sparse_consumer_rows.h"

#include "api/dispatch.h"
#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "flashindexer/candidates.h"

namespace flashindexer {
namespace {

// The candidates of a sparse consumer (blocks [rows, C] i32 on the GPU, the exact form, cb 8, 16
// or 32) and the buffer for their rows metadata. Returns the candidates' rows.
int64_t check_sparse_candidates(ArgCheck& check, const TensorView& sparse_rows,
                                const CandidateInput& candidates) {
  check.tensor("candidates.blocks", candidates.blocks, {DType::kI32}, 2)
      .on_device("candidates.blocks", candidates.blocks, Device::kCUDA);
  if (!check.ok()) return 0;
  check
      .require(candidates.blocks.shape[1] >= 1 && candidates.blocks.shape[1] <= kMaxCandidateBlocks,
               "candidates.blocks has ", candidates.blocks.shape[1],
               " candidate blocks per row, which is not supported: expected 1 <= C <= ",
               kMaxCandidateBlocks)
      .require(!candidates.vllm_compatible,
               "candidates.vllm_compatible: the sparse path takes the exact consumer only")
      .require(
          candidates.block_size == 8 || candidates.block_size == 16 || candidates.block_size == 32,
          "candidates.block_size=", candidates.block_size,
          " is not supported by the sparse path, expected 8, 16 or 32");
  if (!check.ok()) return 0;
  const int64_t rows = candidates.blocks.shape[0];
  check_sparse_rows_buffer(check, "sparse_rows", sparse_rows, rows, candidates, Device::kCUDA);
  return rows;
}

}  // namespace

void check_sparse_rows_buffer(ArgCheck& check, const char* name, const TensorView& sparse_rows,
                              int64_t rows, const CandidateInput& candidates, Device device) {
  check.tensor(name, sparse_rows, {DType::kU8}, 1).on_device(name, sparse_rows, device);
  if (!check.ok()) return;
  check.require(device == Device::kCUDA, name,
                " is the CUDA sparse path's rows metadata; the CPU consumer takes none");
  const size_t needed = sparse_consumer_rows_size(
      rows, static_cast<int>(candidates.blocks.shape[1]), candidates.block_size);
  check.require(static_cast<size_t>(sparse_rows.shape[0]) >= needed, name, " has ",
                sparse_rows.shape[0], " bytes; ", rows, " rows of C=", candidates.blocks.shape[1],
                " blocks of ", candidates.block_size,
                " positions need sparse_consumer_rows_size() = ", needed);
}

size_t sparse_consumer_rows_size(int64_t rows, int num_candidates, int block_size) {
  return cuda::sparse_consumer_rows_size(rows, num_candidates, block_size);
}

Status build_sparse_consumer_rows_prefill(const TensorView& sparse_rows,
                                          const CandidateInput& candidates, const TensorView& ks,
                                          const TensorView& ke, int64_t num_keys,
                                          const RunOptions& options) {
  ArgCheck check("build_sparse_consumer_rows_prefill");
  const int64_t rows = check_sparse_candidates(check, sparse_rows, candidates);
  if (!check.ok()) return check.status();
  check.tensor("ks", ks, {DType::kI32}, 1)
      .dim("ks", ks, 0, rows)
      .on_device("ks", ks, Device::kCUDA)
      .tensor("ke", ke, {DType::kI32}, 1)
      .dim("ke", ke, 0, rows)
      .on_device("ke", ke, Device::kCUDA)
      .require(num_keys >= 0 && num_keys <= INT32_MAX, "num_keys=", num_keys,
               ", expected 0 <= num_keys < 2^31 (the chunk's packed keys)");
  if (!check.ok()) return check.status();
  if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
  return cuda::build_sparse_consumer_rows_prefill(sparse_rows, candidates, ks, ke, num_keys,
                                                  options.cuda_stream);
}

Status build_sparse_consumer_rows_decode(const TensorView& sparse_rows,
                                         const CandidateInput& candidates,
                                         const TensorView& context_lens,
                                         const TensorView& block_table, int next_n,
                                         const PagedKCache& cache, const RunOptions& options) {
  ArgCheck check("build_sparse_consumer_rows_decode");
  const int64_t rows = check_sparse_candidates(check, sparse_rows, candidates);
  if (!check.ok()) return check.status();
  check.require(next_n >= 1 && next_n <= 4, "next_n=", next_n, ", expected 1..4");
  check.tensor("block_table", block_table, {DType::kI32}, 2)
      .on_device("block_table", block_table, Device::kCUDA);
  if (!check.ok()) return check.status();
  const int64_t batch = block_table.shape[0];
  check.require(rows == batch * next_n, "candidates.blocks has ", rows, " rows, expected ", batch,
                " requests x next_n=", next_n);
  const int lens_rank = context_lens.rank == 2 ? 2 : 1;
  check.tensor("context_lens", context_lens, {DType::kI32}, lens_rank)
      .dim("context_lens", context_lens, 0, batch)
      .on_device("context_lens", context_lens, Device::kCUDA);
  if (check.ok() && lens_rank == 2) check.dim("context_lens", context_lens, 1, next_n);
  // The cache's layout is what the entries encode: a page of at most 128 keys, a multiple of the
  // sparse block, and page ids that fit the entries' 24 bits.
  check
      .require(cache.page_size == 32 || cache.page_size == 64 || cache.page_size == 128,
               "cache.page_size=", cache.page_size, " is not supported, expected 32, 64 or 128")
      .require(cache.num_pages >= 0 && cache.num_pages < (int64_t{1} << 24),
               "cache.num_pages=", cache.num_pages,
               " is not supported by the sparse path, expected < 2^24");
  if (!check.ok()) return check.status();
  if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
  return cuda::build_sparse_consumer_rows_decode(sparse_rows, candidates, context_lens, block_table,
                                                 next_n, cache, options.cuda_stream);
}

}  // namespace flashindexer
