// SPDX-License-Identifier: Apache-2.0
// build_sparse_rows (sparse_rows.h): one CTA per row expands, filters and sorts the row's sparse
// blocks in shared memory (at most 8192: C <= 4096, ratio <= 2), drops repeats by a flag scan,
// and writes the blocks, their entries and the row's valid column count.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "cuda/candidates/block_sort.cuh"
#include "cuda/candidates/sparse_entry.cuh"
#include "cuda/candidates/sparse_rows.h"
#include "cuda/candidates/workspace.h"
#include "cuda/common/check.h"

namespace flashindexer::cuda::candidates {
namespace {

constexpr int kRowThreads = 512;
constexpr int32_t kDropped = std::numeric_limits<int32_t>::max();

// The entry of sparse block `block` of row t (format_sparse.cuh): the packed key row of its
// first position, or its page and row in the cache.
__device__ __forceinline__ int32_t entry_of(const SparseSource& source, int64_t t, int64_t start,
                                            int32_t block, int sparse_block) {
  const int64_t position = int64_t{block} * sparse_block;
  if (source.block_table == nullptr) return static_cast<int32_t>(start + position);
  return paged_entry(source, t / source.rows_per_request, position);
}

__global__ void __launch_bounds__(kRowThreads)
    sparse_rows_kernel(SparseRows out, CandidateRowsOnDevice candidates, BoundRows bounds,
                       int64_t width, int sparse_block, int sort_slots, SparseSource source) {
  extern __shared__ int32_t keys[];  // sort_slots: the next power of two of the row's blocks
  __shared__ int warp_sums[32];
  const int64_t t = blockIdx.x;
  const Visible visible = visible_of(bounds, t, width);
  const int64_t row_blocks = (visible.count + sparse_block - 1) / sparse_block;
  const int ratio = candidates.block_size / sparse_block;
  const int slots = out.sparse_per_row;  // C x ratio
  const int32_t* row = candidates.data + t * candidates.stride;
  for (int i = threadIdx.x; i < sort_slots; i += kRowThreads) {
    int32_t key = kDropped;
    if (i < slots) {
      const int64_t block = int64_t{row[i / ratio]} * ratio + i % ratio;
      if (block >= 0 && block < row_blocks) key = static_cast<int32_t>(block);
    }
    keys[i] = key;
  }
  block_sort_ascending(keys, sort_slots);
  // Each thread owns a contiguous run of the sorted keys; a key is kept when it is no repeat.
  const int per_thread = (sort_slots + kRowThreads - 1) / kRowThreads;
  const int first = threadIdx.x * per_thread;
  const int last = min(first + per_thread, sort_slots);
  int kept = 0;
  for (int i = first; i < last; ++i) {
    kept += keys[i] != kDropped && (i == 0 || keys[i] != keys[i - 1]) ? 1 : 0;
  }
  int at = block_exclusive_scan(kept, warp_sums);
  int32_t* blocks = out.blocks + t * out.stride;
  for (int i = first; i < last; ++i) {
    if (keys[i] != kDropped && (i == 0 || keys[i] != keys[i - 1])) blocks[at++] = keys[i];
  }
  // The last thread's run ends the kept ones: the total is its `at`.
  if (threadIdx.x == kRowThreads - 1) warp_sums[0] = at;
  __syncthreads();
  const int n = warp_sums[0];
  const int32_t last_block = n > 0 ? blocks[n - 1] : 0;
  int32_t* entries = out.entries + t * out.stride;
  // Past the kept blocks, the last one again (DeepGEMM's padding): the tail of the row's last
  // tile copies real keys, whose columns lie past end.
  for (int i = threadIdx.x; i < slots; i += kRowThreads) {
    const int32_t block = i < n ? blocks[i] : last_block;
    entries[i] = entry_of(source, t, visible.start, block, sparse_block);
    if (i >= n) blocks[i] = last_block;
  }
  if (threadIdx.x == 0) {
    int64_t valid = 0;
    if (n > 0) {
      const int64_t partial = visible.count - int64_t{last_block} * sparse_block;
      valid = int64_t{n - 1} * sparse_block + (partial < sparse_block ? partial : sparse_block);
    }
    out.end[t] = static_cast<int32_t>(valid);
  }
}

}  // namespace

size_t sparse_rows_bytes(int64_t rows, int sparse_per_row) {
  const size_t array = static_cast<size_t>(rows * pitch_floats(sparse_per_row)) * sizeof(int32_t);
  return kArrayAlignment + 2 * align_bytes(array) +
         align_bytes(static_cast<size_t>(rows) * sizeof(int32_t));
}

SparseRows sparse_rows_in(void* base, int64_t rows, int sparse_per_row) {
  const int64_t stride = pitch_floats(sparse_per_row);
  const size_t array = align_bytes(static_cast<size_t>(rows * stride) * sizeof(int32_t));
  auto* blocks = reinterpret_cast<unsigned char*>(align_bytes(reinterpret_cast<uintptr_t>(base)));
  return {reinterpret_cast<int32_t*>(blocks), reinterpret_cast<int32_t*>(blocks + array),
          reinterpret_cast<int32_t*>(blocks + 2 * array), stride, sparse_per_row};
}

Status build_sparse_rows(const SparseRows& out, const CandidateRowsOnDevice& candidates,
                         const BoundRows& bounds, int64_t rows, int64_t width, int sparse_block,
                         const SparseSource& source, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  int sort_slots = 1;
  while (sort_slots < out.sparse_per_row) sort_slots *= 2;
  sparse_rows_kernel<<<static_cast<unsigned>(rows), kRowThreads, sort_slots * sizeof(int32_t),
                       stream>>>(out, candidates, bounds, width, sparse_block, sort_slots, source);
  return launch_status("sparse consumer rows");
}

}  // namespace flashindexer::cuda::candidates
