// topk_merge_kernel: the exact top-k of a row from its splits' results (decode / few rows).
//
// One CTA per row. A split hands over either its exact top-k (rows of <= kMinSegment keys: one
// split) or, for a gated row, every key of its segment above the row's common threshold. Their
// union holds the row's top-k whenever it has at least min(k, row length) keys and no split gave
// up (kSplitGateFailed); the CTA then loads it (<= kMergeCapacity = 16384 rank keys, 128 KiB) in
// split order into shared memory, selects with the histogram select (histogram_select.cuh), and
// compacts in slot order (deterministic). Otherwise it selects over the row in global memory
// (select_from_global). Sorted best first when asked, else in ascending index order. 1 CTA per
// SM; when the splits' slots total <= kBufferCapacity (8192: the fused indexer's candidate slots
// at k <= 2048; split rows always bring kMergeCapacity) a second instantiation with half the
// buffer runs 2 CTAs per SM, so one CTA's serial phases (load, histogram rounds, sort) overlap
// the other's.
//
// The fused indexer hands its emitted candidates over the same way (one split per row, no
// logits): a row whose candidates are incomplete is left alone, and its visible range goes to
// Params::fallback_lo / hi for the exact fallback that runs next.
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

// The selection's slots. Unsorted answers use them as the bitmap of their indices, so there are
// at least 2048 (16 KiB: one window of 131072 keys) whatever k.
__host__ __device__ inline int merge_selection_slots(int k) {
  constexpr int kBitmapSlots = 2048;
  const int slots = selection_capacity(k);
  return slots > kBitmapSlots ? slots : kBitmapSlots;
}

template <typename T, int kCapacity>
__global__ void __launch_bounds__(kThreads, kCapacity <= kBufferCapacity ? 2 : 1)
    topk_merge_kernel(const __grid_constant__ Params p) {
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
  if (row_count == 0 && p.leave_empty_rows) return;
  const uint32_t row_want = selected_count(row_count, p.k);
  __shared__ uint32_t split_offsets[kMaxSplits + 1];
  const int32_t* counts = p.split_counts + row * p.splits;
  if (threadIdx.x < 32) {
    // Lane s reads split s's count (all loads at once), then a warp scan gives the offsets.
    const int lane = static_cast<int>(threadIdx.x);
    const int32_t raw = lane < p.splits ? counts[lane] : 0;
    // A count past the slot's capacity: keys were dropped (the fused indexer's emission counts on).
    const bool failed = __any_sync(0xffffffffu, raw == kSplitGateFailed || raw > p.split_capacity);
    const uint32_t count = raw > 0 ? static_cast<uint32_t>(raw) : 0u;
    const uint32_t inclusive = warp_inclusive_scan(count);
    if (lane < p.splits) split_offsets[lane] = inclusive - count;
    if (lane == p.splits - 1) split_offsets[p.splits] = inclusive;
    const uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
    if (lane == 0) {
      gate_failed = failed || total < row_want;
      if (p.fallback_hi != nullptr) {  // the fused indexer's select: its fallback takes the row
        if (p.fallback_lo != nullptr) p.fallback_lo[row] = gate_failed ? row_start : 0;
        p.fallback_hi[row] = gate_failed ? row_start + row_count : 0;
        if (gate_failed && p.fallback_rows != nullptr) atomicAdd(p.fallback_rows, 1);
      }
    }
  }
  __syncthreads();
  if (gate_failed) {
    if (p.logits == nullptr) return;  // fused indexer: its exact fallback writes the row
    const T* scores = static_cast<const T*>(p.logits) + row * p.logits_stride + row_start;
    select_from_global(scores, row_count, row_want, 0u, selection, hs, &state);
    write_row_from_any_order(p, row, selection, row_want, row_count,
                             reinterpret_cast<uint32_t*>(buffer), kCapacity * 2, hs.scan);
    return;
  }
  // Dense copy in split order, global to shared without registers (cp.async): every copy of a
  // thread is in flight at once. Loads into registers (16 rank keys per thread, 2 CTAs per SM
  // leave 64 registers) were issued one after another's store: 3.5 of the one-row select's
  // 13 us at k = 2048 (H200).
  const uint64_t* keys = p.split_keys + row * p.splits * p.split_capacity;
  if (p.splits == 1) {
    // One split (the fused indexer's candidates): its count bounds the loop, with no division
    // or offset lookup per slot (a fixed loop over all 8192 slots was 16 % of that select's
    // instructions, with ~3K candidates per row at H32 prefill).
    const uint32_t count = split_offsets[1];
    for (uint32_t i = threadIdx.x; i < count; i += kThreads) {
      ptx::cp_async_8(buffer + i, keys + i);
    }
  } else {
    // Splits' slots to their places in split order. (With a multiply-high in place of the
    // division ptxas put YIELDs into this kernel's loops; tests/cli/check_sass.py rejects them in
    // top-k kernels.)
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
  }
  ptx::cp_async_wait_all();
  __syncthreads();
  const uint32_t valid = split_offsets[p.splits];
  uint32_t lowest = 0xffffffffu;
  uint32_t highest = 0;
  for (uint32_t i = threadIdx.x; i < valid; i += kThreads) {
    const uint32_t score = static_cast<uint32_t>(buffer[i] >> 32);
    lowest = lowest < score ? lowest : score;
    highest = highest > score ? highest : score;
  }
  lowest = __reduce_min_sync(0xffffffffu, lowest);
  highest = __reduce_max_sync(0xffffffffu, highest);
  if ((threadIdx.x & 31) == 0) {
    hs.warp_min[threadIdx.x >> 5] = lowest;
    hs.warp_max[threadIdx.x >> 5] = highest;
  }
  __syncthreads();
  const Candidates candidates{buffer, dense_slice(valid), nullptr, valid};
  const uint32_t lowest_key = reduce_warp_min(hs);
  const uint32_t highest_key = reduce_warp_max(hs);
  if (p.sorted) {
    write_row(p, row, selection,
              select_dense(candidates, row_want, lowest_key, highest_key, selection, hs));
    return;
  }
  // Unsorted: the candidates at or above the cutoff mark their indices straight from the buffer
  // into a bitmap over the selection's space, with no compaction (its counting and placing
  // passes were ~19 % of the fused select's instructions).
  const uint64_t cutoff = dense_cutoff(candidates, row_want, lowest_key, highest_key, hs);
  int32_t* out = p.out + row * p.out_stride0;
  const uint32_t count = write_marked_in_index_order(
      out, p.out_stride1, row_count, reinterpret_cast<uint32_t*>(selection),
      2 * merge_selection_slots(p.k), hs.scan, [&](uint32_t* bits, uint32_t first, uint32_t span) {
        for (uint32_t i = threadIdx.x; i < valid; i += kThreads) {
          const uint64_t key = buffer[i];
          if (key >= cutoff) mark_index(bits, first, span, rank_key_index(key));
        }
      });
  write_padding(p, out, count);
}

}  // namespace

cudaError_t launch_merge(const Params& params, int64_t rows, bool bf16, cudaStream_t stream) {
  const bool small = static_cast<int64_t>(params.splits) * params.split_capacity <= kBufferCapacity;
  const int capacity = small ? kBufferCapacity : kMergeCapacity;
  const size_t shared =
      (capacity + static_cast<size_t>(merge_selection_slots(params.k))) * sizeof(uint64_t);
  const int most = (capacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  auto* kernel = small ? (bf16 ? topk_merge_kernel<uint16_t, kBufferCapacity>
                               : topk_merge_kernel<float, kBufferCapacity>)
                       : (bf16 ? topk_merge_kernel<uint16_t, kMergeCapacity>
                               : topk_merge_kernel<float, kMergeCapacity>);
  const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(kernel, dim3(static_cast<unsigned>(rows)), dim3(kThreads), shared, stream,
                          0, params);
}

}  // namespace flashindexer::cuda::topk
