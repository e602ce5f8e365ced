// SPDX-License-Identifier: Apache-2.0
// select_kernel: the fused indexer's select over a batch's emitted candidates (no logits), built
// from the top-k's blocks: one CTA per row copies the row's candidates into shared memory
// (cp.async) and writes its answer with topk::write_best_candidates, as the top-k's merge kernel
// does with its splits' keys. A row whose candidates are incomplete is left alone, and its
// visible range goes to the fallback ranges for the exact fallback that runs next (dense scoring
// + fallback_topk). The candidates' slots (8192 at k <= 2048) with the selection fit twice per
// SM, so one CTA's serial phases (load, histogram rounds, sort) overlap the other's; 16384 slots
// (k > 2048) run one CTA per SM.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90_fused/select.h"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/params.h"
#include "cuda/topk/write_rows.cuh"

namespace flashindexer::cuda::fused {
namespace {

using topk::kThreads;

template <int kCapacity>
__global__ void __launch_bounds__(kThreads, kCapacity <= topk::kBufferCapacity ? 2 : 1)
    select_kernel(const __grid_constant__ SelectParams s) {
  const topk::Params& p = s.answer;
  extern __shared__ uint64_t shared_keys[];
  uint64_t* buffer = shared_keys;                 // [kCapacity]
  uint64_t* selection = shared_keys + kCapacity;  // [merge_selection_slots(k)]
  __shared__ topk::HistShared hs;
  __shared__ uint32_t valid;
  __shared__ int incomplete;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)

  const int64_t row = blockIdx.x;
  int64_t row_start;
  int64_t row_count;
  topk::row_range(p, row, row_start, row_count);
  const uint32_t row_want = topk::selected_count(row_count, p.k);
  if (threadIdx.x == 0) {
    const int32_t raw = s.counts[row];
    const uint32_t count = raw > 0 ? static_cast<uint32_t>(raw) : 0u;
    valid = count;
    incomplete = raw > s.capacity || count < row_want;
    if (s.fallback_hi != nullptr) {
      if (s.fallback_lo != nullptr) s.fallback_lo[row] = incomplete ? row_start : 0;
      s.fallback_hi[row] = incomplete ? row_start + row_count : 0;
      if (incomplete && s.fallback_rows != nullptr) atomicAdd(s.fallback_rows, 1);
    }
  }
  __syncthreads();
  if (incomplete) return;  // the fallback writes the row
  // The row's count bounds the copy, with no division or offset lookup per slot (a fixed loop
  // over all 8192 slots was 16 % of this select's instructions, with ~3K candidates per row at
  // H32 prefill). Global to shared without registers (cp.async): every copy of a thread is in
  // flight at once.
  const uint32_t count = valid;
  const uint64_t* keys = s.candidates + row * s.capacity;
  for (uint32_t i = threadIdx.x; i < count; i += kThreads) ptx::cp_async_8(buffer + i, keys + i);
  ptx::cp_async_wait_all();
  __syncthreads();
  topk::write_best_candidates(p, row, buffer, count, selection, topk::merge_selection_slots(p.k),
                              row_count, row_want, hs);
}

}  // namespace

cudaError_t launch_select(const SelectParams& params, int64_t rows, cudaStream_t stream) {
  if (params.capacity > topk::kMergeCapacity) return cudaErrorInvalidValue;
  const bool small = params.capacity <= topk::kBufferCapacity;
  const int capacity = small ? topk::kBufferCapacity : topk::kMergeCapacity;
  const size_t shared =
      (capacity + static_cast<size_t>(topk::merge_selection_slots(params.answer.k))) *
      sizeof(uint64_t);
  const int most = (capacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  auto* kernel = small ? select_kernel<topk::kBufferCapacity> : select_kernel<topk::kMergeCapacity>;
  const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), shared, stream,
                          0, params);
}

Status fallback_topk(const TensorView& out, const TensorView& logits, const RowRanges& ranges,
                     int k, bool sorted, const RunOptions& options) {
  return topk::per_row(out, logits, ranges, k, sorted, options, topk::EmptyRows::kLeave);
}

}  // namespace flashindexer::cuda::fused
