// SPDX-License-Identifier: Apache-2.0
// The best-first order of a row's selected rank keys: a bitonic sort held in registers.
//
// A shared-memory bitonic network over 2048 keys is 66 steps, each a CTA barrier and dependent
// shared loads and stores. Here each of the 512 threads holds width / 512 consecutive keys
// (at least one): exchanges between a thread's own keys are register moves, exchanges within a
// warp are shuffles, and only partners in other warps (strides >= 32 x keys per thread) go
// through shared memory: 10 of the 66 steps at width 2048, two barriers each, with each
// thread's keys striped across the exchange buffer (no bank conflicts). Measured on an H200
// (k = 2048 of 131072 keys): the shared-memory network cost 19 us of a one-row top-k, this sort
// with its exchanges in the threads' blocked order 13 us; the striped exchange took another 3.5 us
// off the fused indexer's one-CTA select.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/config.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {

// Whether element i of a descending bitonic merge of blocks of `size` keeps the larger of itself
// and its partner i ^ stride: the lower index does, unless its block is sorted ascending (the odd
// blocks, so that two neighbours form the next size's bitonic sequence). For strides >= the keys
// per thread, the same for all of a thread's keys.
__device__ __forceinline__ bool keeps_larger(int i, int stride, int size) {
  return ((i & stride) == 0) == ((i & size) == 0);
}

__device__ __forceinline__ uint64_t bitonic_keep(uint64_t mine, uint64_t partner,
                                                 bool keep_larger) {
  return keep_larger == (mine > partner) ? mine : partner;
}

// The steps whose partners are in the same thread (stride < kPerThread): compile-time indices,
// so the keys stay in registers.
template <int kPerThread, int kStride>
__device__ __forceinline__ void bitonic_step_in_thread(uint64_t (&keys)[kPerThread], int base,
                                                       int size) {
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    if ((e & kStride) == 0) {
      const uint64_t low = keys[e];
      const uint64_t high = keys[e + kStride];
      const bool descending = ((base + e) & size) == 0;
      const bool swap = descending ? low < high : low > high;
      keys[e] = swap ? high : low;
      keys[e + kStride] = swap ? low : high;
    }
  }
}

// Sorts the `width` (a power of two, kPerThread <= width <= kPerThread * kThreads: the smallest
// kPerThread that holds width, as sort_selection_descending picks it) keys that thread t holds
// as keys[0, kPerThread) = elements [t kPerThread, (t + 1) kPerThread) descending; threads past
// the width hold nothing that matters. scratch: `width` rank keys of shared memory, where key e of
// thread t goes to e * threads + t (consecutive lanes on consecutive words: no bank conflicts;
// the blocked order would put 4-8 lanes on one bank). Contains barriers: call from all threads.
template <int kPerThread>
__device__ void bitonic_sort_registers(uint64_t (&keys)[kPerThread], int width, uint64_t* scratch) {
  const int t = static_cast<int>(threadIdx.x);
  const int base = t * kPerThread;
  const int threads = width / kPerThread;  // those that hold keys
  const bool holds = t < threads;
  for (int size = 2; size <= width; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      if (stride >= 32 * kPerThread) {
        const int partner = t ^ (stride / kPerThread);
        const bool keep_larger = keeps_larger(base, stride, size);
        __syncthreads();  // the previous exchange's reads are done
        if (holds) {
#pragma unroll
          for (int e = 0; e < kPerThread; ++e) scratch[e * threads + t] = keys[e];
        }
        __syncthreads();
        if (holds) {
#pragma unroll
          for (int e = 0; e < kPerThread; ++e) {
            keys[e] = bitonic_keep(keys[e], scratch[e * threads + partner], keep_larger);
          }
        }
      } else if (stride >= kPerThread) {
        const int lanes = stride / kPerThread;
        const bool keep_larger = keeps_larger(base, stride, size);
#pragma unroll
        for (int e = 0; e < kPerThread; ++e) {
          keys[e] =
              bitonic_keep(keys[e], __shfl_xor_sync(0xffffffffu, keys[e], lanes), keep_larger);
        }
      } else if (stride == 4) {
        if constexpr (kPerThread > 4) bitonic_step_in_thread<kPerThread, 4>(keys, base, size);
      } else if (stride == 2) {
        if constexpr (kPerThread > 2) bitonic_step_in_thread<kPerThread, 2>(keys, base, size);
      } else {
        if constexpr (kPerThread > 1) bitonic_step_in_thread<kPerThread, 1>(keys, base, size);
      }
    }
  }
}

// Sorts selection[0, count) best first (rank keys, distinct and nonzero) and hands each thread's
// sorted keys to emit(i, key) for its elements i < count. Needs count <= kMaxTopK. Contains
// barriers: call from all threads.
template <int kPerThread, typename Emit>
__device__ void sort_descending_as(const uint64_t* selection, uint32_t count, int width,
                                   uint64_t* scratch, Emit emit) {
  const int base = static_cast<int>(threadIdx.x) * kPerThread;
  uint64_t keys[kPerThread];
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    keys[e] = base + e < static_cast<int>(count) ? selection[base + e] : 0;  // 0: ranks last
  }
  bitonic_sort_registers<kPerThread>(keys, width, scratch);
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    if (base + e < static_cast<int>(count)) emit(base + e, keys[e]);
  }
}

// Sorts selection[0, count) (count <= kMaxTopK) best first into emit(i, key); the keys are
// sorted in registers, selection serves as the exchange buffer (it holds the power of two
// >= count). Contains barriers: call from all threads.
template <typename Emit>
__device__ void sort_selection_descending(uint64_t* selection, uint32_t count, Emit emit) {
  int width = 1;
  while (width < static_cast<int>(count)) width <<= 1;
  // Every thread's loads precede the first exchange's stores (a barrier in the sort).
  if (width <= kThreads) {
    sort_descending_as<1>(selection, count, width, selection, emit);
  } else if (width <= 2 * kThreads) {
    sort_descending_as<2>(selection, count, width, selection, emit);
  } else if (width <= 4 * kThreads) {
    sort_descending_as<4>(selection, count, width, selection, emit);
  } else {
    sort_descending_as<8>(selection, count, width, selection, emit);
  }
}

static_assert(8 * kThreads >= kMaxTopK, "the register sort holds up to kMaxTopK keys");

}  // namespace flashindexer::cuda::topk
