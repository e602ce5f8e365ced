// SPDX-License-Identifier: Apache-2.0
// The fused indexer's per-row kernel: the sampled gate (gate.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/rank_key.cuh"
#include "cuda/common/warp_scan.cuh"
#include "cuda/sm90_fused/gate.h"
#include "cuda/sm90_scoring/row_range.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"

namespace flashindexer::cuda::fused {
namespace {

using scoring::kTileKeys;

// Sample slots per thread: the sampled tiles of the widest row, kSlotsPerThread per thread.
constexpr int kSampleSlots = kMaxSampleTiles * kTileKeys;
constexpr int kSlotsPerThread = kSampleSlots / topk::kThreads;
static_assert(kSlotsPerThread * topk::kThreads == kSampleSlots && kSlotsPerThread % 4 == 0);
// Gate CTAs per SM: the sample goes through shared memory, not registers, so that four CTAs
// (4 x ~43 KiB) fit with at most 32 registers per thread; the gate is a chain of barriers and
// short phases, and more CTAs per SM overlap them.
constexpr int kGateCtasPerSm = 4;

// Places this warp's slots j with bit j of `take` at consecutive positions from *counter (one
// shared atomic per warp), in any order; calls place(position, j) for each. The loop visits the
// set bits only: a row passes ~k of its up to 8192 sampled keys' gate, a few per thread.
template <typename Place>
__device__ __forceinline__ void place_warp_keys(uint32_t take, uint32_t* counter, Place place) {
  const uint32_t count = __popc(take);
  const uint32_t inclusive = warp_inclusive_scan(count);
  uint32_t base = 0;
  if ((threadIdx.x & 31) == 31) base = atomicAdd(counter, inclusive);
  uint32_t at = __shfl_sync(0xffffffffu, base, 31) + inclusive - count;
  for (; take != 0; take &= take - 1) place(at++, __ffs(take) - 1);
}

// One CTA per row (the top-k's block size, for its histogram select). The row's sample is copied
// into shared memory (cp.async: every copy of a thread in flight at once, no registers held),
// each thread turns its own slots into score keys in place (0, the key of NaN and the lowest,
// where the key is not visible), and the threshold and the emission read them there. Holding the
// sample in registers instead (16 slots per thread, 60 registers) allowed two CTAs per SM.
template <bool kPaged>
__global__ void __launch_bounds__(topk::kThreads, kGateCtasPerSm)
    gate_kernel(const __grid_constant__ RowState s) {
  __shared__ __align__(16) uint32_t sample[kSampleSlots];
  __shared__ topk::HistShared hs;
  __shared__ uint32_t warp_sampled[topk::kWarps];  // visible slots of each warp
  __shared__ uint32_t emitted;
  __shared__ uint32_t passing;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  const int64_t row = blockIdx.x;
  int32_t lo = 0;
  int32_t hi = 0;
  scoring::row_range<kPaged>(s.ranges, row, lo, hi);
  const int64_t length = hi - lo;
  if (threadIdx.x == 0) {
    emitted = 0;
    passing = 0;
    if (row == 0 && s.fallback_rows != nullptr) *s.fallback_rows = 0;
  }
  uint32_t gate = 0;
  bool overflows = false;  // CTA-uniform
  // An MXFP4 row marked for the fallback (RowState::nan_falls_back), CTA-uniform.
  bool marked = false;
  if (s.nan_falls_back) {
    bool nan = false;
    if (s.weights != nullptr && static_cast<int>(threadIdx.x) < s.heads) {
      const float w = s.weights[row * s.weights_stride + threadIdx.x];
      nan = w != w;
    }
    if (s.keys_flagged != nullptr && threadIdx.x == 0) nan = nan || *s.keys_flagged != 0;
    marked = __syncthreads_or(nan) != 0 && length > 0;
  }
  if (s.sample != nullptr) {
    // Sample slot i holds key (i / 64) * tile_stride * 64 + i % 64, written only where visible.
    // 32-bit index arithmetic: slots are < 8192, keys < 2^31 (plan checks).
    const int32_t stride = s.tile_stride;
    const float* row_sample = s.sample + row * s.sample_stride;
    const auto row_slots = static_cast<int32_t>(min(s.sample_stride, int64_t{kSampleSlots}));
    // Slot j of this thread: four consecutive slots per 16-byte vector (j / 4), the vectors
    // kThreads apart; a vector's four slots are consecutive keys of one tile.
    auto slot_of = [&](int j) {
      return (j / 4) * (4 * topk::kThreads) + 4 * static_cast<int32_t>(threadIdx.x) + j % 4;
    };
    auto key_of_slot = [&](int32_t i) {  // i >= 0: unsigned division is a shift
      const auto slot = static_cast<uint32_t>(i);
      return static_cast<int32_t>((slot / kTileKeys) * stride * kTileKeys + slot % kTileKeys);
    };
    auto key_of = [&](int j) { return key_of_slot(slot_of(j)); };
    // The row's slots lie below sample_stride, a multiple of 64: a vector is below it or not at
    // all; rows are 256-byte aligned. A vector at or past it is neither copied nor read: its
    // keys are past the widest row, never visible.
#pragma unroll
    for (int v = 0; v < kSlotsPerThread / 4; ++v) {
      const int32_t i = slot_of(4 * v);
      if (i < row_slots) ptx::cp_async_16(sample + i, row_sample + i);
    }
    ptx::cp_async_wait_all();  // this thread's own slots: no barrier before it reads them
    // Each vector is read and written back whole (a 16-byte access per thread: no bank
    // conflicts, where four 4-byte ones 16 bytes apart conflicted four ways).
    uint32_t valid = 0;  // bit j: slot j holds a visible key
    bool sampled_nan = false;
#pragma unroll
    for (int v = 0; v < kSlotsPerThread / 4; ++v) {
      const int32_t i = slot_of(4 * v);
      if (i >= row_slots) continue;
      const int32_t first = key_of_slot(i);
      uint4 keys = *reinterpret_cast<const uint4*>(sample + i);
      uint32_t* key = &keys.x;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const bool visible = first + e >= lo && first + e < hi;
        sampled_nan = sampled_nan || (visible && (key[e] & 0x7fffffffu) > 0x7f800000u);
        key[e] = visible ? score_key(key[e]) : 0u;
        valid |= static_cast<uint32_t>(visible) << (4 * v + e);
      }
      *reinterpret_cast<uint4*>(sample + i) = keys;
    }
    const uint32_t warp_valid = __reduce_add_sync(0xffffffffu, __popc(valid));
    if ((threadIdx.x & 31) == 0) warp_sampled[threadIdx.x / 32] = warp_valid;
    // The keys, warp_sampled, and the counters zeroed.
    if (__syncthreads_or(sampled_nan) != 0 && s.nan_falls_back) marked = true;
    // The row's visible slots, summed where needed (a register held across the threshold's
    // select spilled).
    auto sampled = [&] {
      uint32_t n = 0;
#pragma unroll
      for (int w = 0; w < topk::kWarps; ++w) n += warp_sampled[w];
      return n;
    };
    if (length > s.capacity && !marked) {
      // The rank-th largest of the slots is the rank-th largest visible key: the others are 0.
      const uint32_t n = sampled();
      if (n > 0) {
        const float q =
            static_cast<float>(n) * static_cast<float>(s.k) / static_cast<float>(length);
        const float r = q + topk::kSampleSigmas * sqrtf(q) + topk::kRankSlack;
        const uint32_t rank = r >= static_cast<float>(n) ? n : static_cast<uint32_t>(r);
        uint32_t largest = 0;
        topk::sample_threshold(sample, row_slots, rank < 1 ? 1u : rank, false, hs, gate, largest);
      }
    }
    // The candidates' order does not matter: the select ranks them by rank key.
    uint32_t taken = 0;  // bit j: slot j passes the gate
#pragma unroll
    for (int v = 0; v < kSlotsPerThread / 4; ++v) {
      const uint32_t visible = valid >> (4 * v) & 0xfu;
      if (visible == 0) continue;
      const uint4 keys = *reinterpret_cast<const uint4*>(sample + slot_of(4 * v));
      const uint32_t* key = &keys.x;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        taken |= static_cast<uint32_t>((visible >> e & 1) && key[e] >= gate) << (4 * v + e);
      }
    }
    if (gate != 0) {
      // Heavy ties at the gate (a row of equal scores: all keys pass) predict far more keys than
      // the slots: such a row takes the fallback at once, rather than after a scan that emits
      // every key it sees (a row of zero queries cost the scan ~1 ms at 128K keys, H200).
      const uint32_t warp_passing = __reduce_add_sync(0xffffffffu, __popc(taken));
      if ((threadIdx.x & 31) == 0) atomicAdd(&passing, warp_passing);
      __syncthreads();
      overflows = static_cast<double>(passing) * static_cast<double>(length) >
                  2.0 * static_cast<double>(s.capacity) * static_cast<double>(sampled());
    }
    overflows = overflows || marked;
    if (overflows) {
      if (threadIdx.x == 0) emitted = static_cast<uint32_t>(s.capacity) + 1;
    } else {
      uint64_t* slots = s.candidates + row * s.capacity;
      place_warp_keys(taken, &emitted, [&](uint32_t at, int j) {
        if (at < static_cast<uint32_t>(s.capacity)) {
          slots[at] = rank_key(sample[slot_of(j)], static_cast<uint32_t>(key_of(j) - lo));
        }
      });
    }
  }
  __syncthreads();
  overflows = overflows || marked;  // a marked row without a sample
  if (threadIdx.x == 0) {
    s.counts[row] = overflows ? s.capacity + 1 : static_cast<int32_t>(emitted);
    // The scan compares scores with the threshold as a float (key_threshold: the same keys pass).
    // A row that overflows already: +inf, so that the scan emits next to nothing (what it
    // emits counts on past the slots).
    s.gate[row] = overflows   ? __uint_as_float(0x7f800000u)
                  : gate == 0 ? __uint_as_float(0x7fc00000u)
                              : key_threshold(gate);
  }
}

}  // namespace

cudaError_t launch_gate(const RowState& state, int64_t rows, bool paged, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  auto* kernel = paged ? gate_kernel<true> : gate_kernel<false>;
  return launch_dependent(kernel, dim3(static_cast<unsigned>(rows)), dim3(topk::kThreads), 0,
                          stream, 0, state);
}

}  // namespace flashindexer::cuda::fused
