// SPDX-License-Identifier: Apache-2.0
// The scoring kernel's shared memory: key stages (keys and scales, the format's bytes), two Q and
// weight buffers, two published work items, the epilogue's region, then the barriers.
#pragma once

#include <cstdint>

#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/schedule.cuh"

namespace flashindexer::cuda::scoring {

// T: the epilogue's Traits for this instantiation (its shared bytes and barriers: the storing
// epilogue has none, and keeps those bytes for key stages); Format: the keys' format policy.
template <int kHeads, int kN, typename T, typename F>
struct SharedLayout {
  using Traits = T;
  using Format = F;
  // Key tiles per consumer step, the epilogue's choice (its Traits), with register keys too.
  static constexpr int kTilesPerStep =
      F::kRegisterKeys ? T::kRegisterKeyTilesPerStep : T::kTilesPerStep;
  static constexpr int kTileBytes = F::kTileBytes;
  static constexpr int kTileScaleBytes = F::kTileScaleBytes;
  static constexpr int kQBytes = kN * kHeadDim;
  // Two Q tiles, two weight tiles, two ItemInfos, the epilogue's bytes and the four item
  // barriers (and the epilogue's); each stage adds its keys, scales and two barriers.
  static constexpr int kFixedBytes = 2 * kQBytes + 2 * kN * 4 +
                                     2 * static_cast<int>(sizeof(ItemInfo)) + T::kSharedBytes +
                                     (4 + T::kBarriers) * 8;
  // Each consumer warpgroup has its own half of the ring (see produce), so the count is even.
  // A converting format's raw ring and Q staging (format_mxfp4.cuh; none for FP8), with its
  // barriers.
  static constexpr int kRawSlots = F::template kRawSlots<kN>;
  static constexpr int kRawRegionBytes = F::template kRawRegionBytes<kN>;
  static constexpr int kRawBarrierCount = F::template kRawBarriers<kN>;
  static constexpr int kStages =
      (kSharedBudget - kFixedBytes - kRawRegionBytes - kRawBarrierCount * 8) /
      (kTileBytes + kTileScaleBytes + 16) / 2 * 2;
  static constexpr int kHalfStages = kStages / 2;
  static constexpr int kKeys = 0;
  static constexpr int kQ = kKeys + kStages * kTileBytes;
  // The raw rings: ring r's slot s at kRaw + (r kRawSlots + s) x slot bytes (kRawSlots per
  // converting warp); then the two Q staging buffers and the slots' entry words.
  static constexpr int kRaw = kQ + 2 * kQBytes;
  static constexpr int kQStaging = kRaw + (kProducerWarps - 1) * kRawSlots * F::kRawSlotBytes;
  static constexpr int kRawEntries = kQStaging + 2 * kN * kHeadDim / 2;
  static constexpr int kScales = kRaw + kRawRegionBytes;
  static constexpr int kWeights = kScales + kStages * kTileScaleBytes;
  static constexpr int kItems = kWeights + 2 * kN * 4;
  static constexpr int kEpilogue = kItems + 2 * static_cast<int>(sizeof(ItemInfo));
  static constexpr int kBarriers = kEpilogue + T::kSharedBytes;
  // Stages' full and empty, items' full and empty, then the epilogue's.
  static constexpr int kEpilogueBarriers = 2 * kStages + 4;
  // A converting format's raw slots' full and empty barriers (RawRing, producer.cuh).
  static constexpr int kRawBarriers = kEpilogueBarriers + T::kBarriers;
  static constexpr int kBarrierCount = 2 * kStages + 4 + T::kBarriers + kRawBarrierCount;
  static constexpr int kBytes = kBarriers + kBarrierCount * 8;
  static_assert(kBytes <= kSharedBudget, "shared memory layout over budget");
  static_assert(kBarriers % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(kScales % 128 == 0 && kTileScaleBytes % 128 == 0 || F::kSparseBlock == 0,
                "a sparse format's scale slots are TMA destinations: 128-byte aligned");
};

}  // namespace flashindexer::cuda::scoring
