// The fused indexer's per-row kernel: the sampled gate (fused_rows.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/indexer/fused_rows.h"
#include "cuda/scoring/row_range.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/select_core.cuh"

namespace flashindexer::cuda::fused {
namespace {

using scoring::kTileKeys;

// One CTA per row (the top-k's block size, for its histogram select).
template <bool kPaged>
__global__ void __launch_bounds__(topk::kThreads) gate_kernel(const __grid_constant__ RowState s) {
  __shared__ uint32_t sample[kMaxSampleTiles * kTileKeys];
  __shared__ topk::HistShared hs;
  __shared__ uint32_t sampled;
  __shared__ uint32_t emitted;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  const int64_t row = blockIdx.x;
  int32_t lo = 0;
  int32_t hi = 0;
  scoring::row_range<kPaged>(s.ranges, row, lo, hi);
  const int64_t length = hi - lo;
  if (threadIdx.x == 0) {
    sampled = 0;
    emitted = 0;
  }
  __syncthreads();
  uint32_t gate = 0;
  if (s.sample != nullptr) {
    // Sample slot j holds key (j / 64) * tile_stride * 64 + j % 64 (visible ones only).
    const int32_t stride = s.tile_stride;
    const int64_t first = static_cast<int64_t>(lo / kTileKeys + stride - 1) / stride * kTileKeys;
    const int64_t last =
        static_cast<int64_t>((hi + kTileKeys - 1) / kTileKeys + stride - 1) / stride * kTileKeys;
    const float* row_sample = s.sample + row * s.sample_stride;
    auto key_of = [&](int64_t j) { return (j / kTileKeys) * stride * kTileKeys + j % kTileKeys; };
    if (length > s.capacity) {
      // The gate depends on the sample's histogram only, not on the order of this gather.
      for (int64_t j = first + threadIdx.x; j < last; j += topk::kThreads) {
        const int64_t key = key_of(j);
        if (key >= lo && key < hi) {
          sample[atomicAdd(&sampled, 1u)] = score_key(__float_as_uint(__ldg(row_sample + j)));
        }
      }
      __syncthreads();
      const uint32_t n = sampled;
      if (n > 0) {
        const float q =
            static_cast<float>(n) * static_cast<float>(s.k) / static_cast<float>(length);
        const float r = q + topk::kSampleSigmas * sqrtf(q) + topk::kRankSlack;
        const uint32_t rank = r >= static_cast<float>(n) ? n : static_cast<uint32_t>(r);
        uint32_t largest = 0;
        topk::sample_threshold(sample, static_cast<int>(n), rank < 1 ? 1u : rank, false, hs, gate,
                               largest);
      }
    }
    // The candidates' order does not matter: the select ranks them by rank key.
    uint64_t* slots = s.candidates + row * s.capacity;
    for (int64_t j = first + threadIdx.x; j < last; j += topk::kThreads) {
      const int64_t key = key_of(j);
      if (key < lo || key >= hi) continue;
      const uint32_t score = score_key(__float_as_uint(__ldg(row_sample + j)));
      if (score < gate) continue;
      const uint32_t at = atomicAdd(&emitted, 1u);
      if (at < static_cast<uint32_t>(s.capacity)) {
        slots[at] = rank_key(score, static_cast<uint32_t>(key - lo));
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    s.counts[row] = static_cast<int32_t>(emitted);
    s.gate[row] = gate;
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
