// SPDX-License-Identifier: Apache-2.0
// The scoring kernel's consumers (warpgroups 1 and 2): the wgmma of each step's key tiles
// against the item's Q tile, the relu-weighted head sums in registers, then the epilogue
// (store_epilogue.cuh; the fused indexer's emit_epilogue.cuh) with the step's scores.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/layout.cuh"
#include "cuda/sm90_scoring/params.h"
#include "cuda/sm90_scoring/schedule.cuh"

namespace flashindexer::cuda::scoring {

// Rows of one Q tile, and which (row, key row) sums each lane of a quad ends up owning: what its
// epilogue stores or emits.
//  * Three or more rows (lane-owned, or reduced across the quad): lane c owns rows 4 i + c, both
//    of its key rows (key_row and key_row + 8).
//  * One or two rows reduced across the quad, when the epilogue asks for one score per lane
//    (kOneScorePerLane: the emitting kernels, fused decode at next_n 1-2 with H = 64 and H = 32):
//    the reduce-scatter ends with one (row, key row) per lane, so
//    each lane tests one score per tile against the gate where one or two of the four lanes
//    tested two (half the ballots and queue work; fused decode 64 x 131072 keys 340 -> 321 us
//    on the H200). The storing kernels keep the row-per-lane form: there it measured no faster.
// The sums are the same bits in both forms (reduce_scatter_rows).
template <int kHeads, int kN, bool kOneScorePerLane = false>
struct TileRows {
  static constexpr int kRows = kN / kHeads;
  static constexpr int kPadded = (kRows + 3) / 4 * 4;
  static constexpr bool kSplitKeyRows =
      kOneScorePerLane && !kLaneOwnedRows<kHeads, kN> && kRows <= 2;
  static constexpr int kPerLane = kSplitKeyRows ? 1 : kPadded / 4;  // rows a lane owns
  static constexpr int kKeyRowsPerLane = kSplitKeyRows ? 1 : 2;     // key rows of each
  // The tile row of the lane's owned row i. With one row, lanes c and c ^ 1 end with the same
  // sum, and only the even one owns it (owns).
  __device__ __forceinline__ static int row(int i, int lane) {
    if constexpr (kSplitKeyRows) return kRows == 2 ? lane & 1 : 0;
    return lane % 4 + 4 * i;
  }
  __device__ __forceinline__ static bool owns(int lane) {
    return !kSplitKeyRows || kRows == 2 || (lane & 1) == 0;
  }
  // Which of the thread's two key rows (0: key_row, 1: key_row + 8) is its r-th.
  __device__ __forceinline__ static int key_half(int r, int lane) {
    return kSplitKeyRows ? (lane >> 1) & 1 : r;
  }
};

// Which (row, head) pair of the Q tile column 8 j + 2 c + e of the wgmma holds; lane c of each quad
// holds the columns 8 j + 2 c + {0, 1} of its accumulators.
//  * Lane-owned rows (kLaneOwnedRows: 4 or 8 rows per tile, the Q tile loaded permuted): with
//    t = 2 j + e, row c + 4 (t / H), head t % H. Each lane holds every head of its own rows, so a
//    head sum never leaves its thread.
//  * Otherwise (1-3 rows: decode next_n 1-3 at H = 64, 1-2 at H = 32): row j / (H / 8), head
//    8 (j % (H / 8)) + 2 c + e; each row is spread over the quad and reduced across it.
template <int kHeads, int kN>
struct TileColumn {
  static constexpr bool kLaneRows = kLaneOwnedRows<kHeads, kN>;
  // The tile row of n-block j, element e, for lane c (c matters only for lane-owned rows).
  __device__ __forceinline__ static int row(int j, int e, int c) {
    return kLaneRows ? c + 4 * ((2 * j + e) / kHeads) : j / (kHeads / 8);
  }
  __device__ __forceinline__ static int head(int j, int e, int c) {
    return kLaneRows ? (2 * j + e) % kHeads : 8 * (j % (kHeads / 8)) + 2 * c + e;
  }
};

// Per-thread weights of one Q tile: w[2 j + e] is the weight of column 8 j + 2 (lane % 4) + e.
template <int kN>
struct TileWeights {
  float w[kN / 4];
};

template <int kHeads, int kN>
__device__ __forceinline__ void load_weights(TileWeights<kN>& weights, const float* tile_w,
                                             int lane) {
  using C = TileColumn<kHeads, kN>;
#pragma unroll
  for (int j = 0; j < kN / 8; ++j) {
    const int row = C::row(j, 0, lane % 4);
    const int head = C::head(j, 0, lane % 4);  // even: the pair is heads head, head + 1
    const float2 pair = *reinterpret_cast<const float2*>(tile_w + row * kHeads + head);
    weights.w[2 * j] = pair.x;
    weights.w[2 * j + 1] = pair.y;
  }
}

// A thread's head sums over one tile, for its two key rows (16 warp + lane / 4, and + 8), times 2
// (relu taken as x + |x|). Lane-owned rows: four interleaved chains per (owned row, key row),
// n-block j feeding chain j % 4, so that eight independent FFMA chains hide their latency; they
// are combined as (s_0 + s_2) + (s_1 + s_3). Otherwise: one sum per (tile row, key row) of the
// thread's heads, reduced across the quad.
template <int kHeads, int kN>
struct HeadSums {
  using R = TileRows<kHeads, kN>;
  static constexpr int kChains = 4;
  float v[kLaneOwnedRows<kHeads, kN> ? R::kPerLane * 2 * kChains : R::kPadded * 2];
  // Lane-owned rows: chain k of owned row i, key row r. Otherwise: tile row q, key row r.
  __device__ __forceinline__ float& chain(int i, int r, int k) {
    return v[(i * 2 + r) * kChains + k];
  }
  __device__ __forceinline__ float& row_sum(int q, int r) { return v[q * 2 + r]; }
};

// Adds one column part's accumulators to the head sums, heads in ascending column order. `acc`
// holds the part's accumulators; its first n-block is block kFirstBlock of the tile.
template <int kHeads, int kN, int kPartN, int kFirstBlock>
__device__ __forceinline__ void add_head_sums(const float (&acc)[kPartN / 2],
                                              const TileWeights<kN>& weights,
                                              HeadSums<kHeads, kN>& sums) {
  if constexpr (kLaneOwnedRows<kHeads, kN>) {
#pragma unroll
    for (int local = 0; local < kPartN / 8; ++local) {
      const int j = kFirstBlock + local;  // n-block in the tile
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int i = (2 * j + e) / kHeads;  // owned row (TileColumn::row is c + 4 i)
        const int k = j % HeadSums<kHeads, kN>::kChains;
        const float x0 = acc[4 * local + e];
        const float x1 = acc[4 * local + 2 + e];
        sums.chain(i, 0, k) = __fmaf_rn(weights.w[2 * j + e], x0 + fabsf(x0), sums.chain(i, 0, k));
        sums.chain(i, 1, k) = __fmaf_rn(weights.w[2 * j + e], x1 + fabsf(x1), sums.chain(i, 1, k));
      }
    }
  } else {
    constexpr int kBlocksPerRow = kHeads / 8;
    constexpr int kFirstRow = kFirstBlock / kBlocksPerRow;
#pragma unroll
    for (int q = kFirstRow; q < kFirstRow + kPartN / kHeads; ++q) {
      float s0 = 0.0f;
      float s1 = 0.0f;
#pragma unroll
      for (int b = 0; b < kBlocksPerRow; ++b) {
        const int j = q * kBlocksPerRow + b;  // n-block in the tile
        const int local = j - kFirstBlock;    // n-block in the part
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float x0 = acc[4 * local + e];
          const float x1 = acc[4 * local + 2 + e];
          s0 = __fmaf_rn(weights.w[2 * j + e], x0 + fabsf(x0), s0);
          s1 = __fmaf_rn(weights.w[2 * j + e], x1 + fabsf(x1), s1);
        }
      }
      sums.row_sum(q, 0) = s0;
      sums.row_sum(q, 1) = s1;
    }
  }
}

// The finished sums a lane owns (TileRows): owned[i][r] for its owned row i and its r-th key row.
template <int kHeads, int kN, bool kOneScorePerLane>
using OwnedSums = float[TileRows<kHeads, kN, kOneScorePerLane>::kPerLane]
                       [TileRows<kHeads, kN, kOneScorePerLane>::kKeyRowsPerLane];

// The quad reduce-scatter of the head sums. Every (row, key row) sum ends as
//   (s_c + s_{c^2}) + (s_{c^1} + s_{c^3})
// of the four lanes' partial sums s, on whichever lane c owns it: an order fixed by the row
// alone, and since a + b == b + a exactly, the same bits on every lane (and in the split form as
// in the row-per-lane form). Rows past kRows (padding to a multiple of 4) must be zero.
template <int kHeads, int kN, bool kOneScorePerLane>
__device__ __forceinline__ void reduce_scatter_rows(
    HeadSums<kHeads, kN>& sums, int lane, OwnedSums<kHeads, kN, kOneScorePerLane>& owned) {
  using R = TileRows<kHeads, kN, kOneScorePerLane>;
  const bool high = (lane & 2) != 0;
  const bool odd = (lane & 1) != 0;
  if constexpr (R::kSplitKeyRows) {
    // Step 1 (lanes c, c ^ 2): keep key row (c >> 1) & 1 of every row, hand over the other.
    float half[R::kRows];
#pragma unroll
    for (int q = 0; q < R::kRows; ++q) {
      const float keep = high ? sums.row_sum(q, 1) : sums.row_sum(q, 0);
      const float send = high ? sums.row_sum(q, 0) : sums.row_sum(q, 1);
      half[q] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
    }
    // Step 2 (lanes c, c ^ 1): two rows: keep row c & 1; one row: both lanes add the pair.
    if constexpr (R::kRows == 2) {
      const float keep = odd ? half[1] : half[0];
      const float send = odd ? half[0] : half[1];
      owned[0][0] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
    } else {
      owned[0][0] = half[0] + __shfl_xor_sync(0xffffffffu, half[0], 1);
    }
  } else if constexpr (R::kRows == 1) {
    // One row (storing decode at next_n 1): the same sum on all four lanes in two
    // butterfly steps, without the three rows of padding; lanes 1-3 own padding rows, which
    // nothing stores.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float pair = sums.row_sum(0, r) + __shfl_xor_sync(0xffffffffu, sums.row_sum(0, r), 2);
      owned[0][r] = pair + __shfl_xor_sync(0xffffffffu, pair, 1);
    }
  } else {
    // Step 1 (lanes c, c ^ 2): keep rows with bit 1 of (q % 4) equal to bit 1 of c.
    float half[R::kPadded / 2][2];
#pragma unroll
    for (int i = 0; i < R::kPadded / 4; ++i) {
#pragma unroll
      for (int low = 0; low < 2; ++low) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const float a = sums.row_sum(4 * i + low, r);
          const float b = sums.row_sum(4 * i + 2 + low, r);
          const float keep = high ? b : a;
          const float send = high ? a : b;
          half[2 * i + low][r] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
      }
    }
    // Step 2 (lanes c, c ^ 1): keep the row whose bit 0 matches bit 0 of c.
#pragma unroll
    for (int i = 0; i < R::kPerLane; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float a = half[2 * i][r];
        const float b = half[2 * i + 1][r];
        const float keep = odd ? b : a;
        const float send = odd ? a : b;
        owned[i][r] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
      }
    }
  }
}

// The finished head sums this lane owns (TileRows). The order of every addition is fixed by the
// row alone.
template <int kHeads, int kN, bool kOneScorePerLane>
__device__ __forceinline__ void owned_row_sums(HeadSums<kHeads, kN>& sums, int lane,
                                               OwnedSums<kHeads, kN, kOneScorePerLane>& owned) {
  if constexpr (kLaneOwnedRows<kHeads, kN>) {
#pragma unroll
    for (int i = 0; i < TileRows<kHeads, kN>::kPerLane; ++i) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        owned[i][r] = (sums.chain(i, r, 0) + sums.chain(i, r, 2)) +
                      (sums.chain(i, r, 1) + sums.chain(i, r, 3));
      }
    }
  } else {
    reduce_scatter_rows<kHeads, kN, kOneScorePerLane>(sums, lane, owned);
  }
}

// Waits for part kPart's wgmma (committed one group per part) and adds its head sums, for
// every part but the last.
template <int kHeads, int kN, int kParts, int kPart>
__device__ __forceinline__ void sum_parts_while_mma_runs(float (&acc)[kParts][kN / kParts / 2],
                                                         const TileWeights<kN>& weights,
                                                         HeadSums<kHeads, kN>& sums) {
  constexpr int kPartN = kN / kParts;
  if constexpr (kPart < kParts - 1) {
    ptx::wgmma_wait_group<kParts - 1 - kPart>();
#pragma unroll
    for (int i = 0; i < kPartN / 2; ++i) ptx::fence_operand(acc[kPart][i]);
    add_head_sums<kHeads, kN, kPartN, kPart * kPartN / 8>(acc[kPart], weights, sums);
    sum_parts_while_mma_runs<kHeads, kN, kParts, kPart + 1>(acc, weights, sums);
  }
}

template <int kTiles, int kParts, int kPartN>
__device__ __forceinline__ void fence_accumulators(float (&acc)[kTiles][kParts][kPartN / 2]) {
#pragma unroll
  for (int u = 0; u < kTiles; ++u) {
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
#pragma unroll
      for (int i = 0; i < kPartN / 2; ++i) ptx::fence_operand(acc[u][part][i]);
    }
  }
}

// A register-keys format's per-tile A operand (format_mxfp4_registers.cuh); nothing for the
// formats whose wgmma reads the key stage itself.
template <typename Format, bool = Format::kRegisterKeys>
struct KeyOperand {
  struct type {};
};
template <typename Format>
struct KeyOperand<Format, true> {
  using type = typename Format::Operand;
};

// One consumer warpgroup (`consumer`, 0 or 1): takes its steps of every work item, issues their
// wgmma, turns the accumulators into scores and hands them to the epilogue, a policy type with
// these hooks (StoreEpilogue is the simplest):
//  * Consumer(p, f, e, smem, consumer, warp, lane): the epilogue's per-thread state, made once
//    (warp: the consumer warp, 0-7, broadcast from lane 0 so that the compiler knows it is
//    warp-uniform);
//  * begin_row(i, row0, q, lo, hi): at each item, for each row the lane owns (TileRows);
//  * after_mma(): once a step's wgmma is issued (work that overlaps the tensor cores);
//  * step(p, f, ...): the step's finished scores, owned[u][i][r] * half_scale[u][r] for tile u,
//  owned
//    row i, key row r;
//  * end_item(row0), finish(): after each item, and after the last.
// L: the kernel's SharedLayout (layout.cuh), with the epilogue's Traits and the keys' format.
// FormatArgs: a converting format's parameters (KernelParams' third member), else unused.
template <int kHeads, int kN, bool kPaged, typename Epilogue, typename L, typename FormatArgs = int>
__device__ __forceinline__ void consume(const ScoreParams& p, const TileFilter& f,
                                        const typename Epilogue::Params& e, uint8_t* smem,
                                        int consumer, const FormatArgs& format_args = {}) {
  using T = typename L::Traits;
  using Format = typename L::Format;
  constexpr int kTilesPerStep = L::kTilesPerStep;
  constexpr int kParts = kPartsFor<kN>;
  constexpr int kPartN = kN / kParts;
  static_assert(kParts == 1 || kTilesPerStep == 1, "split parts or pair tiles, not both");
  using R = TileRows<kHeads, kN, T::kOneScorePerLane>;
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int key_row = 16 * warp + lane / 4;  // and key_row + 8
  uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
  uint64_t* full = barriers;
  uint64_t* empty = barriers + L::kStages;
  uint64_t* q_full = barriers + 2 * L::kStages;
  uint64_t* q_empty = q_full + 2;
  const ItemInfo* items = reinterpret_cast<const ItemInfo*>(smem + L::kItems);

  const int consumer_warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32) - 4, 0);
  typename Epilogue::template Consumer<kHeads, kN, kPaged, L> out(p, f, e, smem, consumer,
                                                                  consumer_warp, lane);
  __syncwarp();
  float acc[kTilesPerStep][kParts][kPartN / 2] = {};
  TileWeights<kN> weights;
  uint32_t my_tiles = 0;    // tiles this warpgroup has read: its place in its half of the ring
  uint32_t step_count = 0;  // steps so far; step s belongs to consumer s % 2
  for (uint32_t item_count = 0;; ++item_count) {
    const int buffer = item_count & 1;
    const ItemInfo& info = wait_for_item(items, q_full, item_count);
    const int32_t row0 = info.row0;
    if (row0 < 0) break;
    const int32_t tile_begin = info.tile_begin;
    const int32_t tile_end = info.tile_end;
    // The rows this lane stores (or emits for): q = R::row(i, lane).
    int32_t lo[R::kPerLane];
    int32_t hi[R::kPerLane];
#pragma unroll
    for (int i = 0; i < R::kPerLane; ++i) {
      const int q = R::row(i, lane);
      const bool mine = q < R::kRows && q < info.rows && R::owns(lane);
      lo[i] = mine ? info.lo[q] : 0;
      hi[i] = mine ? info.hi[q] : 0;
      out.begin_row(i, row0, q, lo[i], hi[i]);
    }
    // The epilogue's steps read copies of the ranges. Handed lo and hi themselves (by reference),
    // the arrays stayed in memory until the epilogue was inlined, and the compiler then split the
    // loads above into two branches (and, in the H = 64 prefill kernel, another register
    // allocation): the SASS was no longer the one measured.
    int32_t step_lo[R::kPerLane];
    int32_t step_hi[R::kPerLane];
#pragma unroll
    for (int i = 0; i < R::kPerLane; ++i) {
      step_lo[i] = lo[i];
      step_hi[i] = hi[i];
    }
    load_weights<kHeads, kN>(
        weights, reinterpret_cast<const float*>(smem + L::kWeights + buffer * kN * 4), lane);
    const uint64_t q_desc0 =
        ptx::smem_descriptor_k128_swizzle128(smem + L::kQ + buffer * L::kQBytes, 0);

    for (TileWalk walk(f, tile_begin); walk.tile < tile_end; ++step_count) {
      int32_t tile_of[kTilesPerStep];
      const int tiles = take_step<kTilesPerStep>(walk, f, tile_end, tile_of);
      if (static_cast<int>(step_count % kConsumerGroups) != consumer) continue;
      uint32_t stages[kTilesPerStep];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const uint32_t place = my_tiles + u;
        stages[u] = consumer * L::kHalfStages + place % L::kHalfStages;
        if (u < tiles) ptx::mbarrier_wait(&full[stages[u]], (place / L::kHalfStages) & 1);
      }
      // A gathering format's stages were written through the generic proxy (cp.async), and the
      // wgmma reads them through the async proxy.
      if constexpr (Format::kThreadGather) ptx::fence_proxy_async_shared();
      my_tiles += tiles;
      // Every thread arrives after its own reads of the stage. Those are ld.shared (generic
      // proxy) and the stage is refilled by TMA (async proxy), so the arrival waits behind a
      // proxy fence: without it the loads may still be in flight when the producer reuses the
      // stage (seen on the H200 as wrong scores in H32 prefill once the consumer loop ran faster;
      // decode issued its arrivals with the loads in flight too).
      auto release_stages = [&] {
        ptx::fence_proxy_async_shared();
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          if (u < tiles) ptx::mbarrier_arrive(&empty[stages[u]]);
        }
      };
      // Register keys: every tile's A operand and scales out of its stage (a missing second
      // tile's from the first one's, dropped like its sums), then the stages are free: the wgmma
      // reads only registers and the Q tile.
      typename KeyOperand<Format>::type operands[kTilesPerStep];
      if constexpr (Format::kRegisterKeys) {
        const auto* tables =
            reinterpret_cast<const uint2*>(smem + L::kRawEntries + Format::kTablesOffset);
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) {
          const uint32_t stage = u < tiles ? stages[u] : stages[0];
          Format::load_operand(operands[u], smem + L::kKeys + stage * L::kTileBytes,
                               smem + L::kScales + stage * L::kTileScaleBytes, tables, format_args,
                               key_row, lane);
        }
        release_stages();
      }
      fence_accumulators<kTilesPerStep, kParts, kPartN>(acc);
      ptx::wgmma_fence();
      // No branch around wgmma (ptxas would serialize them): a missing second tile re-reads the
      // first one's stage and its result is dropped.
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        const uint32_t stage = u < tiles ? stages[u] : stages[0];
        const uint64_t key_desc =
            ptx::smem_descriptor_k128_swizzle128(smem + L::kKeys + stage * L::kTileBytes, 0);
#pragma unroll
        for (int part = 0; part < kParts; ++part) {
          const uint64_t q_desc = ptx::smem_descriptor_advance(q_desc0, part * kPartN * kHeadDim);
#pragma unroll
          for (int k = 0; k < kHeadDim / Format::kStepK; ++k) {
            if constexpr (Format::kRegisterKeys) {
              Format::template mma<kPartN>(acc[u][part], operands[u], q_desc, k);
            } else {
              Format::template mma<kPartN>(acc[u][part], key_desc, q_desc, k);
            }
          }
          ptx::wgmma_commit_group();
        }
      }
      out.after_mma();
      HeadSums<kHeads, kN> sums[kTilesPerStep] = {};
      // The head sums of each part but the last overlap the wgmma of the parts after it.
      sum_parts_while_mma_runs<kHeads, kN, kParts, 0>(acc[0], weights, sums[0]);
      ptx::wgmma_wait_group<0>();
      fence_accumulators<kTilesPerStep, kParts, kPartN>(acc);
      if constexpr (Format::kRegisterKeys) {
#pragma unroll
        for (int u = 0; u < kTilesPerStep; ++u) Format::fence_operand(operands[u]);
      }
      // relu was taken as x + |x| = 2 relu(x): the 1/2 is exact in the scale.
      float half_scale[kTilesPerStep][R::kKeyRowsPerLane];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        // A missing second tile reads the first one's stage, as its wgmma does, where the
        // stage's scales are written by stores rather than TMA: the sparse format's block
        // places (producer) and a converting format's key scales (converter). Reading its own
        // stage, not waited for, raced those writes under racecheck on an H200 (its result is
        // dropped). The FP8 format's reads of such a stage are left as measured.
        constexpr bool kStoredScales = Format::kSparseBlock > 0 || Format::kConverts;
        const uint32_t scale_stage = kStoredScales && u >= tiles ? stages[0] : stages[u];
        const uint8_t* scales = smem + L::kScales + scale_stage * L::kTileScaleBytes;
#pragma unroll
        for (int r = 0; r < R::kKeyRowsPerLane; ++r) {
          if constexpr (Format::kRegisterKeys) {
            const int half = R::key_half(r, lane);
            half_scale[u][r] = 0.5f * (half == 0 ? operands[u].scale[0] : operands[u].scale[1]);
          } else {
            half_scale[u][r] = 0.5f * Format::scale(scales, key_row + 8 * R::key_half(r, lane));
          }
        }
      }
      // The stage's reads are its wgmma and scales here (register keys released it before the
      // wgmma).
      if constexpr (!Format::kRegisterKeys) release_stages();
      // Every tile's sums first, without a branch between them, so that the compiler interleaves
      // the tiles' FFMA chains; a step's missing second tile is summed and never stored.
      OwnedSums<kHeads, kN, T::kOneScorePerLane> owned[kTilesPerStep];
#pragma unroll
      for (int u = 0; u < kTilesPerStep; ++u) {
        add_head_sums<kHeads, kN, kPartN, (kParts - 1) * kPartN / 8>(acc[u][kParts - 1], weights,
                                                                     sums[u]);
        owned_row_sums<kHeads, kN, T::kOneScorePerLane>(sums[u], lane, owned[u]);
      }
      out.template step<kTilesPerStep>(p, f, tile_of, tiles, owned, half_scale, step_lo, step_hi,
                                       row0, key_row, my_tiles);
      // The next step is the other warpgroup's: step over it here, not through another pass of
      // the loop head, whose branches cost the consumer more than the skipped step's own work
      // (prefill H64 4096 x 131072: 9.59-9.61 -> 9.21-9.28 ms in alternation).
      if (walk.tile < tile_end) {
        int32_t skipped[kTilesPerStep];
        take_step<kTilesPerStep>(walk, f, tile_end, skipped);
        ++step_count;
      }
    }
    out.end_item(row0);
    // Every consumer thread, after its last read; the weights were read by ld.shared and are
    // refilled by TMA (see the stage release above).
    ptx::fence_proxy_async_shared();
    ptx::mbarrier_arrive(&q_empty[buffer]);
  }
  out.finish();
}

}  // namespace flashindexer::cuda::scoring
