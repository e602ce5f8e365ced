// SPDX-License-Identifier: Apache-2.0
// topk_merge_kernel: the exact top-k of a row from its splits' results (decode / few rows).
//
// One CTA per row. A split hands over either its exact top-k (rows of <= kMinSegment keys: one
// split) or, for a gated row, every key of its segment above the row's common threshold. Their
// union holds the row's top-k whenever it has at least min(k, row length) keys and no split gave
// up (kSplitGateFailed); the CTA then loads it (<= kMergeCapacity = 16384 rank keys, 128 KiB) in
// split order into shared memory, selects with the histogram select (histogram_select.cuh), and
// compacts in slot order (deterministic). Otherwise it selects over the row in global memory
// (select_from_global). Sorted best first when asked, else in ascending index order. 1 CTA per
// SM. (The fused indexer's select, sm90_fused/select_kernel.cu, selects over its emitted
// candidates the same way, with write_best_candidates.)
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/radix_select.cuh"
#include "cuda/topk/write_rows.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {
namespace {

static_assert(kMaxSplits <= 32, "one lane per split reads the split counts");

template <typename T, EmptyRows kEmptyRows>
__global__ void __launch_bounds__(kThreads, 1) topk_merge_kernel(const __grid_constant__ Params p) {
  constexpr int kCapacity = kMergeCapacity;
  extern __shared__ uint64_t shared_keys[];
  uint64_t* buffer = shared_keys;                 // [kCapacity]
  uint64_t* selection = shared_keys + kCapacity;  // [merge_selection_slots(k)]
  __shared__ HistShared hs;
  __shared__ SelectState state;
  __shared__ int gate_failed;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)

  const int64_t row = blockIdx.x;
  int64_t row_start;
  int64_t row_count;
  row_range(p, row, row_start, row_count);
  if (kEmptyRows == EmptyRows::kLeave && row_count == 0) return;
  const uint32_t row_want = selected_count(row_count, p.k);
  __shared__ uint32_t split_offsets[kMaxSplits + 1];
  const int32_t* counts = p.split_counts + row * p.splits;
  if (threadIdx.x < 32) {
    // Lane s reads split s's count (all loads at once), then a warp scan gives the offsets.
    const int lane = static_cast<int>(threadIdx.x);
    const int32_t raw = lane < p.splits ? counts[lane] : 0;
    const bool failed = __any_sync(0xffffffffu, raw == kSplitGateFailed || raw > p.split_capacity);
    const uint32_t count = raw > 0 ? static_cast<uint32_t>(raw) : 0u;
    const uint32_t inclusive = warp_inclusive_scan(count);
    if (lane < p.splits) split_offsets[lane] = inclusive - count;
    if (lane == p.splits - 1) split_offsets[p.splits] = inclusive;
    const uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
    if (lane == 0) gate_failed = failed || total < row_want;
  }
  __syncthreads();
  if (gate_failed) {
    const T* scores = static_cast<const T*>(p.logits) + row * p.logits_stride + row_start;
    select_from_global(scores, row_count, row_want, 0u, selection, hs, &state);
    write_row_from_any_order(p, row, selection, row_want, row_count,
                             reinterpret_cast<uint32_t*>(buffer), kCapacity * 2, hs.scan);
    return;
  }
  // The splits' keys to their places, dense in split order, global to shared without registers
  // (cp.async): every copy of a thread is in flight at once. Loads into registers (16 rank keys
  // per thread, 2 CTAs per SM leave 64 registers) were issued one after another's store: 3.5 of
  // the one-row select's 13 us at k = 2048 (H200). (With a multiply-high in place of the
  // division ptxas put YIELDs into this kernel's loops; tests/tools/check_sass.py rejects them in
  // top-k kernels.)
  const uint64_t* keys = p.split_keys + row * p.splits * p.split_capacity;
  constexpr int kPerThread = kCapacity / kThreads;
  const int dense = p.splits * p.split_capacity;
#pragma unroll
  for (int j = 0; j < kPerThread; ++j) {
    const int g = j * kThreads + static_cast<int>(threadIdx.x);
    if (g >= dense) break;
    const int split = g / p.split_capacity;
    const uint32_t at = split_offsets[split] + (g - split * p.split_capacity);
    if (at < split_offsets[split + 1]) ptx::cp_async_8(buffer + at, keys + g);
  }
  ptx::cp_async_wait_all();
  __syncthreads();
  write_best_candidates(p, row, buffer, split_offsets[p.splits], selection,
                        merge_selection_slots(p.k), row_count, row_want, hs);
}

template <typename T, EmptyRows kEmptyRows>
cudaError_t launch_merge(const Params& params, int64_t rows, cudaStream_t stream) {
  const size_t shared =
      (kMergeCapacity + static_cast<size_t>(merge_selection_slots(params.k))) * sizeof(uint64_t);
  const int most = (kMergeCapacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  auto* kernel = topk_merge_kernel<T, kEmptyRows>;
  const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), shared, stream,
                          0, params);
}

}  // namespace

cudaError_t launch_merge(const Params& params, int64_t rows, bool bf16, EmptyRows empty_rows,
                         cudaStream_t stream) {
  if (empty_rows == EmptyRows::kLeave) {  // the fused indexer's fallback: fp32 logits only
    return bf16 ? cudaErrorNotSupported
                : launch_merge<float, EmptyRows::kLeave>(params, rows, stream);
  }
  return bf16 ? launch_merge<uint16_t, EmptyRows::kWrite>(params, rows, stream)
              : launch_merge<float, EmptyRows::kWrite>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
