// SPDX-License-Identifier: Apache-2.0
// block_scores_kernel: a fused source layer's block scores (block_scores.h) from the scan's
// entries (block_max.cuh), in place. A row laid out in groups has its scores from the scan but
// for its sampled tiles and its newest block; any other row converts every entry, one thread per
// block, consecutive threads on consecutive blocks. A row's work spreads over up to
// kMaxCtasPerRow CTAs.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90_fused/block_max.cuh"
#include "cuda/sm90_fused/block_scores.h"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/row_range.cuh"

namespace flashindexer::cuda::fused {
namespace {

using scoring::kTileKeys;

constexpr int kThreads = 256;
// A group row needs at most 1024 threads (128 sampled tiles of 8 groups); any other row takes
// its blocks in strides of this many CTAs.
constexpr int64_t kMaxCtasPerRow = 8;

// A row laid out in groups: the scan stored its blocks' scores; only the sampled tiles' groups
// (1 tile in 32 or more), the newest block (pinned) and the count are left. Thread `index` of
// the row takes sampled group index % 8 of the row's sampled tile index / 8.
__device__ __forceinline__ void finish_group_row(const BlockScoresParams& s, float* entries,
                                                 const float* sample, int32_t lo, int32_t hi,
                                                 int32_t blocks, int32_t index) {
  const int32_t tile = (index / kGroupKeys) << s.tile_shift;
  const int32_t group = tile * kTileKeys + (index % kGroupKeys) * kGroupKeys;
  if (sample == nullptr || group >= hi || group + kGroupKeys <= lo) return;
  const int32_t block = (group - lo) / kGroupKeys;
  if (block == blocks - 1) return;  // pinned
  const float* scores = sample + (tile >> s.tile_shift) * kTileKeys + group % kTileKeys;
  float m = -INFINITY;
  for (int j = 0; j < kGroupKeys; ++j) {
    if (group + j >= lo && group + j < hi) m = max_keeping_nan(m, scores[j]);
  }
  entries[block] = nan_as_inf(m);
}

// Any other row: every block from its atomic key, with the sampled tiles' keys folded in.
__device__ __forceinline__ void finish_atomic_block(const BlockScoresParams& s, float* entries,
                                                    const float* sample, int32_t lo, int32_t hi,
                                                    int32_t blocks, int32_t b) {
  const int32_t cb = s.block_size;
  float score = INFINITY;  // the newest visible block is pinned
  if (b < blocks - 1) {
    const int32_t first = lo + b * cb;
    const int32_t last = min(first + cb, hi);
    // The scanned keys' maximum (block_key's inverse; -inf where nothing was folded).
    float m = key_threshold(reinterpret_cast<const uint32_t*>(entries)[b]);
    if (sample != nullptr) {
      const int32_t sampled = (int32_t{1} << s.tile_shift) - 1;  // tile t sampled: t & this == 0
      for (int32_t tile = first / kTileKeys; tile * kTileKeys < last; ++tile) {
        if ((tile & sampled) != 0) continue;
        const int32_t from = max(first, tile * kTileKeys);
        const int32_t to = min(last, (tile + 1) * kTileKeys);
        const float* tile_scores = sample + (tile >> s.tile_shift) * kTileKeys;
        for (int32_t key = from; key < to; ++key) {
          m = max_keeping_nan(m, tile_scores[key % kTileKeys]);
        }
      }
    }
    score = nan_as_inf(m);
  }
  entries[b] = score;
}

template <bool kPaged>
__global__ void __launch_bounds__(kThreads)
    block_scores_kernel(const __grid_constant__ BlockScoresParams s) {
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  const int64_t row = blockIdx.x;
  int32_t lo = 0;
  int32_t hi = 0;
  scoring::row_range<kPaged>(s.ranges, row, lo, hi);
  const int32_t blocks = (hi - lo + s.block_size - 1) / s.block_size;
  float* entries = s.entries + row * s.pitch;
  const float* sample = s.sample == nullptr ? nullptr : s.sample + row * s.sample_stride;
  const int32_t stride = static_cast<int32_t>(gridDim.y) * kThreads;
  const int32_t first_index = static_cast<int32_t>(blockIdx.y) * kThreads + threadIdx.x;
  if (blocks_are_groups(lo, s.block_size)) {
    if (first_index == 0) {
      s.row_blocks[row] = blocks;
      if (blocks > 0) entries[blocks - 1] = INFINITY;
    }
    const int32_t sampled_groups =
        s.sample == nullptr ? 0 : static_cast<int32_t>(s.sample_stride / kTileKeys) * kGroupKeys;
    for (int32_t i = first_index; i < sampled_groups; i += stride) {
      finish_group_row(s, entries, sample, lo, hi, blocks, i);
    }
    return;
  }
  if (first_index == 0) s.row_blocks[row] = blocks;
  for (int32_t b = first_index; b < blocks; b += stride) {
    finish_atomic_block(s, entries, sample, lo, hi, blocks, b);
  }
}

}  // namespace

cudaError_t launch_block_scores(const BlockScoresParams& params, int64_t rows, bool paged,
                                cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const int64_t width = std::max<int64_t>(params.ranges.width, 1);
  const int64_t blocks = (width + params.block_size - 1) / params.block_size;
  const auto ctas_per_row = static_cast<unsigned>(
      std::clamp<int64_t>((blocks + kThreads - 1) / kThreads, 1, kMaxCtasPerRow));
  const dim3 grid(static_cast<unsigned>(rows), ctas_per_row);
  return paged ? launch_dependent(block_scores_kernel<true>, grid, dim3(kThreads), 0, stream, 0,
                                  params)
               : launch_dependent(block_scores_kernel<false>, grid, dim3(kThreads), 0, stream, 0,
                                  params);
}

}  // namespace flashindexer::cuda::fused
