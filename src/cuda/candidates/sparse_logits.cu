// SPDX-License-Identifier: Apache-2.0
// sparse_mqa_logits / paged_sparse_mqa_logits on CUDA tensors (candidates.h): one small kernel
// turns each row's sparse indices into the entries of the sparse scoring kernel
// (format_sparse.cuh) in the caller's workspace, then that kernel writes the sparse logits.
// Indices are device values and are not checked: an entry that would name a key outside the
// operands names key 0 (packed) or page 0 (paged) instead, so no copy leaves the tensors.
#include <cuda_runtime.h>

#include <cstdint>

#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/sparse_entry.cuh"
#include "cuda/candidates/workspace.h"
#include "cuda/common/check.h"
#include "cuda/sm90_scoring/format_sparse.cuh"
#include "cuda/sm90_scoring/sparse_call.h"

namespace flashindexer::cuda {
namespace {

constexpr int kEntryThreads = 256;

struct EntryParams {
  int32_t* entries;
  int64_t entry_stride;
  const int32_t* indices;
  int64_t index_stride0;
  int64_t index_stride1;
  int64_t rows;
  int64_t blocks;  // S
  int sparse_block;
  // Packed: row t's first key of block j is index * SBK + ks[t] % SBK, of num_keys keys.
  const int32_t* ks = nullptr;
  int64_t ks_stride = 1;
  int64_t num_keys = 0;
  // Paged (source.block_table != null): position index * SBK of request t / next_n (the
  // source's rows_per_request).
  candidates::SparseSource source;
};

__global__ void __launch_bounds__(kEntryThreads) sparse_entries_kernel(const EntryParams p) {
  const int64_t at = static_cast<int64_t>(blockIdx.x) * kEntryThreads + threadIdx.x;
  if (at >= p.rows * p.blocks) return;
  const int64_t t = at / p.blocks;
  const int64_t j = at - t * p.blocks;
  const int64_t index = p.indices[t * p.index_stride0 + j * p.index_stride1];
  int32_t entry = 0;
  if (p.source.block_table == nullptr) {
    int64_t ks = p.ks[t * p.ks_stride];
    ks = ks < 0 ? 0 : ks;
    const int64_t key = index * p.sparse_block + ks % p.sparse_block;
    entry = key >= 0 && key < p.num_keys ? static_cast<int32_t>(key) : 0;
  } else {
    entry =
        candidates::paged_entry(p.source, t / p.source.rows_per_request, index * p.sparse_block);
  }
  p.entries[t * p.entry_stride + j] = entry;
}

// The entries array (256-byte rows) at the start of the workspace.
Status entries_of(const char* op, const RunOptions& options, int64_t rows, int64_t blocks,
                  int32_t** entries, int64_t* stride) {
  candidates::Carver carver(options);
  if (Status status = carver.check(op, sparse_logits_workspace_size(rows, blocks),
                                   "sparse_logits_cuda_workspace_size(rows, S)");
      !status.ok()) {
    return status;
  }
  *stride = candidates::pitch_floats(blocks);
  *entries = carver.take<int32_t>(static_cast<size_t>(rows * *stride));
  return Status::Ok();
}

Status launch_entries(const char* op, const EntryParams& p, void* stream) {
  const int64_t total = p.rows * p.blocks;
  if (total == 0) return Status::Ok();
  sparse_entries_kernel<<<static_cast<unsigned>((total + kEntryThreads - 1) / kEntryThreads),
                          kEntryThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status(op);
}

// Builds the entries (p's source fields set; its arrays and sizes filled here), then scores
// q's rows over them into the first S * SBK columns of logits.
Status score_sparse_rows(const char* op, EntryParams p, SparseScoring scoring,
                         const TensorView& logits, const TensorView& sparse_indices,
                         const TensorView& end, int sparse_block, bool clean,
                         const RunOptions& options) {
  const int64_t rows = scoring.q.shape[0];
  const int64_t blocks = sparse_indices.shape[1];
  if (rows == 0 || blocks == 0) return Status::Ok();
  ArgCheck check(op);
  check.require(end.stride[0] == 1, "end must be contiguous on CUDA");
  if (!check.ok()) return check.status();
  if (Status status = entries_of(op, options, rows, blocks, &p.entries, &p.entry_stride);
      !status.ok()) {
    return status;
  }
  p.indices = sparse_indices.ptr<const int32_t>();
  p.index_stride0 = sparse_indices.stride[0];
  p.index_stride1 = sparse_indices.stride[1];
  p.rows = rows;
  p.blocks = blocks;
  p.sparse_block = sparse_block;
  if (Status status = launch_entries(op, p, options.cuda_stream); !status.ok()) return status;
  scoring.logits = logits;
  scoring.logits.shape[1] = blocks * sparse_block;  // the kernel's width, and its clean fill's
  scoring.entries = p.entries;
  scoring.entry_stride = p.entry_stride;
  scoring.entries_per_row = blocks;
  scoring.end = end.ptr<const int32_t>();
  scoring.sparse_block = sparse_block;
  return launch_sparse_scoring(op, scoring, clean, options.cuda_stream);
}

}  // namespace

size_t sparse_logits_workspace_size(int64_t rows, int64_t sparse_blocks) {
  return candidates::kArrayAlignment +
         candidates::align_bytes(
             static_cast<size_t>(rows * candidates::pitch_floats(sparse_blocks)) * sizeof(int32_t));
}

Status sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                         const QuantizedTensor& keys, const TensorView& weights,
                         const TensorView& sparse_indices, const TensorView& end,
                         const TensorView& ks, int sparse_block, bool clean,
                         const RunOptions& options) {
  const char* op = "sparse_mqa_logits";
  ArgCheck check(op);
  check.require(keys.values.shape[0] < (int64_t{1} << 31), "keys must be fewer than 2^31");
  if (!check.ok()) return check.status();
  EntryParams p{};
  p.ks = ks.ptr<const int32_t>();
  p.ks_stride = ks.stride[0];
  p.num_keys = keys.values.shape[0];
  SparseScoring scoring;
  scoring.q = q.values;
  scoring.q_scales = q.scales;
  scoring.weights = weights;
  scoring.keys = &keys;
  return score_sparse_rows(op, p, scoring, logits, sparse_indices, end, sparse_block, clean,
                           options);
}

Status paged_sparse_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                               const PagedKCache& cache, const TensorView& weights,
                               const TensorView& sparse_indices, const TensorView& end,
                               const TensorView& block_table, int sparse_block, bool clean,
                               const RunOptions& options) {
  const char* op = "paged_sparse_mqa_logits";
  if (Status status = check_sparse_paged_source(op, q, cache); !status.ok()) return status;
  EntryParams p{};
  p.source = candidates::paged_source(block_table, cache, static_cast<int>(q.values.shape[1]));
  SparseScoring scoring;
  scoring.q = decode_query_rows(q.values, 0, q.values.shape[0]);
  if (q.scales.defined()) scoring.q_scales = decode_query_rows(q.scales, 0, q.values.shape[0]);
  scoring.weights = weights;
  scoring.cache = &cache;
  scoring.next_n = static_cast<int>(q.values.shape[1]);
  return score_sparse_rows(op, p, scoring, logits, sparse_indices, end, sparse_block, clean,
                           options);
}

}  // namespace flashindexer::cuda
