// SPDX-License-Identifier: Apache-2.0
// The storing epilogue of the scoring kernel (mqa_logits, paged_mqa_logits, and the fused
// indexer's sample and fallback): each visible score goes to its logits column. It needs no
// parameters of its own (ScoreParams has the logits), no shared memory and no side warps.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/consumer.cuh"
#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {

struct StoreEpilogue {
  struct Params {};

  // What the epilogue asks of the pipeline, per instantiation (consume, produce, SharedLayout).
  template <int kHeads, int kN, bool kPaged>
  struct Traits {
    static constexpr int kTilesPerStep = kTilesPerStepFor<kN>;
    static constexpr int kRegisterKeyTilesPerStep = kTilesPerStep;  // SharedLayout
    static constexpr bool kOneScorePerLane = false;  // the row-per-lane form (TileRows)
    static constexpr bool kReadOnce = false;         // the cache with the default L2 policy
    static constexpr int kSideWarps = 0;             // every producer warp loads
    static constexpr int kSharedBytes = 0;
    static constexpr int kBarriers = 0;
  };

  template <typename L>
  __device__ __forceinline__ static void init_barriers(uint64_t*) {}

  template <int kHeads, int kN, bool kPaged, typename L>
  struct Consumer {
    using R = TileRows<kHeads, kN>;
    int lane;

    __device__ __forceinline__ Consumer(const ScoreParams&, const TileFilter&, const Params&,
                                        uint8_t*, int, int, int lane_)
        : lane(lane_) {}
    __device__ __forceinline__ void begin_row(int, int32_t, int, int32_t, int32_t) {}
    __device__ __forceinline__ void after_mma() {}
    template <int kTilesPerStep, typename Owned>
    __device__ __forceinline__ void step(const ScoreParams& p, const TileFilter& f,
                                         const int32_t (&tile_of)[kTilesPerStep], int tiles,
                                         const Owned (&owned)[kTilesPerStep],
                                         const float (&half_scale)[kTilesPerStep][2],
                                         const int32_t (&lo)[R::kPerLane],
                                         const int32_t (&hi)[R::kPerLane], int32_t row0,
                                         int key_row, uint32_t) {
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        if (u >= tiles) break;
        const int32_t key0 = tile_of[u] * kTileKeys + key_row;
        const int32_t key1 = key0 + 8;
#pragma unroll
        for (int i = 0; i < R::kPerLane; ++i) {
          const int q = R::row(i, lane);
          // Sampled tiles are stored side by side: tile t at column block t / tile_stride.
          const int32_t column0 = (tile_of[u] >> f.tile_shift) * kTileKeys + key_row;
          float* out = p.logits + static_cast<int64_t>(row0 + q) * p.logits_stride;
          const float score0 = owned[u][i][0] * half_scale[u][0];
          const float score1 = owned[u][i][1] * half_scale[u][1];
          if (key0 >= lo[i] && key0 < hi[i]) out[column0] = score0;
          if (key1 >= lo[i] && key1 < hi[i]) out[column0 + 8] = score1;
        }
      }
    }
    __device__ __forceinline__ void end_item(int32_t) {}
    __device__ __forceinline__ void finish() {}
  };
};

}  // namespace flashindexer::cuda::scoring
