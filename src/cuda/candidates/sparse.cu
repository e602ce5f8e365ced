// SPDX-License-Identifier: Apache-2.0
// The sparse consumer's metadata on CUDA (spec §8.5): candidate_blocks_to_sparse_indices (one CTA
// per row: expand each candidate to its ratio sparse blocks, keep those inside the row, sort
// ascending in shared memory -- C * ratio <= 8192 keys -- with duplicates kept, pad by repeating
// the last kept block, and count the valid columns) and sparse_topk_remap (elementwise).
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/candidates/block_sort.cuh"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/rows.cuh"
#include "cuda/common/check.h"

namespace flashindexer::cuda {
namespace candidates {
namespace {

constexpr int kSparseThreads = 512;
constexpr int kRemapThreads = 256;
constexpr int32_t kDropped = std::numeric_limits<int32_t>::max();

__global__ void __launch_bounds__(kSparseThreads)
    sparse_indices_kernel(int32_t* sparse_indices, int64_t sparse_stride, int32_t* end,
                          int64_t end_stride, const int32_t* candidates, int64_t candidate_stride,
                          int num_candidates, int ratio, int sparse_block, BoundRows rows) {
  extern __shared__ int32_t keys[];
  __shared__ int kept;
  const int64_t t = blockIdx.x;
  const int64_t ks = rows.ks_of(t);
  const int64_t ke = rows.ke_of(t);
  const int64_t row_keys = ke - ks > 0 ? ke - ks : 0;
  const int64_t row_sparse_blocks = (row_keys + sparse_block - 1) / sparse_block;
  const int slots = num_candidates * ratio;  // a power of two: C is one, ratio 1 or 2
  const int32_t* row = candidates + t * candidate_stride;
  if (threadIdx.x == 0) kept = 0;
  __syncthreads();
  int mine = 0;
  for (int i = threadIdx.x; i < slots; i += kSparseThreads) {
    const int64_t block = int64_t{row[i / ratio]} * ratio + i % ratio;
    const bool inside = block >= 0 && block < row_sparse_blocks;
    keys[i] = inside ? static_cast<int32_t>(block) : kDropped;
    mine += inside ? 1 : 0;
  }
  atomicAdd(&kept, mine);
  block_sort_ascending(keys, slots);
  const int n = kept;
  const int64_t base = ks / sparse_block;
  const int64_t last = n > 0 ? keys[n - 1] : 0;
  int32_t* out = sparse_indices + t * sparse_stride;
  for (int i = threadIdx.x; i < slots; i += kSparseThreads) {
    out[i] = static_cast<int32_t>((i < n ? keys[i] : last) + base);
  }
  if (threadIdx.x == 0) {
    int64_t valid = 0;
    if (n > 0) {
      int64_t partial = ke - (last * sparse_block + ks);
      partial = partial < 1 ? 1 : (partial > sparse_block ? sparse_block : partial);
      valid = int64_t{n - 1} * sparse_block + partial;
    }
    end[t * end_stride] = static_cast<int32_t>(valid);
  }
}

__global__ void __launch_bounds__(kRemapThreads)
    sparse_remap_kernel(int32_t* out, int64_t out_stride, const int32_t* columns,
                        int64_t column_stride, int k, const int32_t* sparse_indices,
                        int64_t sparse_stride, int64_t sparse_width, int sparse_block,
                        BoundRows rows) {
  const int64_t t = blockIdx.x;
  const int64_t base = rows.ks_of(t) / sparse_block;
  for (int i = threadIdx.x; i < k; i += kRemapThreads) {
    const int64_t c = columns[t * column_stride + i];
    int32_t position = -1;
    if (c >= 0 && c < sparse_width) {
      const int64_t block = sparse_indices[t * sparse_stride + c / sparse_block];
      position = static_cast<int32_t>((block - base) * sparse_block + c % sparse_block);
    }
    out[t * out_stride + i] = position;
  }
}

}  // namespace
}  // namespace candidates

Status candidate_blocks_to_sparse_indices(const TensorView& sparse_indices, const TensorView& end,
                                          const TensorView& candidates, const CandidateRows& rows,
                                          int block_size, int sparse_block, void* stream) {
  const int64_t count = candidates.shape[0];
  if (count == 0) return Status::Ok();
  const int ratio = block_size / sparse_block;
  const int slots = static_cast<int>(candidates.shape[1]) * ratio;
  candidates::sparse_indices_kernel<<<static_cast<unsigned>(count), candidates::kSparseThreads,
                                      slots * sizeof(int32_t), static_cast<cudaStream_t>(stream)>>>(
      sparse_indices.ptr<int32_t>(), sparse_indices.stride[0], end.ptr<int32_t>(), end.stride[0],
      candidates.ptr<const int32_t>(), candidates.stride[0], static_cast<int>(candidates.shape[1]),
      ratio, sparse_block, candidates::bound_rows_of(rows));
  return launch_status("candidate_blocks_to_sparse_indices");
}

Status sparse_topk_remap(const TensorView& out, const TensorView& columns,
                         const TensorView& sparse_indices, const CandidateRows& rows,
                         int sparse_block, void* stream) {
  const int64_t count = columns.shape[0];
  if (count == 0 || columns.shape[1] == 0) return Status::Ok();
  candidates::sparse_remap_kernel<<<static_cast<unsigned>(count), candidates::kRemapThreads, 0,
                                    static_cast<cudaStream_t>(stream)>>>(
      out.ptr<int32_t>(), out.stride[0], columns.ptr<const int32_t>(), columns.stride[0],
      static_cast<int>(columns.shape[1]), sparse_indices.ptr<const int32_t>(),
      sparse_indices.stride[0], sparse_indices.shape[1] * sparse_block, sparse_block,
      candidates::bound_rows_of(rows));
  return launch_status("sparse_topk_remap");
}

}  // namespace flashindexer::cuda
