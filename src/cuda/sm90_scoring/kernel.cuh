// SPDX-License-Identifier: Apache-2.0
// The FP8 scoring kernel for Hopper: logits[row, key] = kscale[key] * sum_h W[row, h] *
// relu(q[row, h, :] . k[key, :]), for prefill (packed keys) and paged decode.
//
// Organisation (one persistent CTA per SM, 384 threads):
//  * Warpgroup 0: the producer (producer.cuh). Its warps walk the CTA's work items (ScoreParams:
//  (group,
//    chunk) items in turn for prefill, the CTA's equal share of all key tiles for decode); warp 0
//    publishes each non-empty one in shared memory (ItemInfo) with its Q tile (up to kN x 128 B)
//    and weights; the four warps stream the item's keys by TMA in 64-key tiles
//    (8 KiB + 256 B of scales) through a ring of stages (layout.cuh, kStages, one half per
//    consumer warpgroup, two producer warps per half). Each warp visits only its consumer's
//    steps: the per-tile producer work (block-table lookup, barrier wait, copies) once held
//    decode at 0.79 of copy; the key stream alone now reaches 0.98.
//  * Warpgroups 1 and 2: the consumers (consumer.cuh). They take alternate steps (one key tile, or
//  two for
//    N <= 128). For one tile: wgmma m64 x kN x k32 (keys are A, the Q tile's (row, head) pairs
//    are B, 4 k-steps; for N = 256 two 128-column groups, so the first group's sums overlap the
//    second's wgmma), then in registers: relu as x + |x| (one FADD, the 1/2 goes into the key
//    scale), times the weight, summed over the thread's heads, times kscale / 2, handed to the
//    epilogue (store_epilogue.cuh stores it to the logits). With 4
//    or 8 rows per tile the Q tile is loaded permuted so that each lane holds every head of its
//    rows (TileColumn); with fewer, a quad reduce-scatter adds the other lanes' heads.
//
// The pieces are policies: the schedule (schedule.cuh: work items, the tile walk that TileFilter
// narrows for the fused indexer's sampling, the item channel), the keys' format (Format:
// format_e4m3.cuh; format_sparse.cuh gathers blocks; format_mxfp4.cuh converts MXFP4 in the
// producer warpgroup: warp 0 loads raw tiles, warps 1-3 write the e4m3 stages;
// format_mxfp4_registers.cuh, for decode, in the consumers' A registers), and the Epilogue
// (the hooks consume() calls; its Traits say what it needs of the pipeline). The fused indexer's
// emitting epilogue (sm90_fused/emit_epilogue.cuh) tests the very scores this kernel would store
// against each row's gate and queues the candidates; in its prefill form producer warps 1-3 are its
// side warps, which read the scores from shared memory.
//
// Determinism: each (row, key) is computed in one fixed order (the wgmma over D, then heads in
// ascending n-block order into four chains combined as (s0 + s2) + (s1 + s3), or into one sum per
// lane followed by the quad reduce-scatter), whatever the schedule, tile or CTA.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/consumer.cuh"
#include "cuda/sm90_scoring/format_e4m3.cuh"
#include "cuda/sm90_scoring/format_mxfp4.cuh"
#include "cuda/sm90_scoring/format_mxfp4_registers.cuh"
#include "cuda/sm90_scoring/format_mxfp4_sparse.cuh"
#include "cuda/sm90_scoring/format_sparse.cuh"
#include "cuda/sm90_scoring/layout.cuh"
#include "cuda/sm90_scoring/params.h"
#include "cuda/sm90_scoring/producer.cuh"
#include "cuda/sm90_scoring/store_epilogue.cuh"

namespace flashindexer::cuda::scoring {

// The kernel's parameters after its tensor maps: ScoreParams, then the epilogue's (nothing for
// the storing one), in one block. As a kernel parameter of their own, the emitting epilogue's
// fields were all loaded at the kernel's start and held in registers, where they were loaded at
// their uses before the split; the emitting kernels' SASS changed with it.
// A converting format's parameters (Format::Params, format_mxfp4.cuh) come third; the FP8
// formats have none (void), and their block is the one measured.
template <typename EpilogueParams, typename FormatParams = void>
struct KernelParams {
  ScoreParams score;
  EpilogueParams epilogue;
  FormatParams format;
};
template <typename EpilogueParams>
struct KernelParams<EpilogueParams, void> {
  ScoreParams score;
  EpilogueParams epilogue;
};

template <int kHeads, int kN, bool kPaged, typename Epilogue, typename Format = KeysE4M3>
__global__ void __launch_bounds__(kThreads, 1)
    score_kernel(const __grid_constant__ CUtensorMap q_map,
                 const __grid_constant__ CUtensorMap w_map,
                 const __grid_constant__ CUtensorMap key_map,
                 const __grid_constant__ CUtensorMap scale_map,
                 const KernelParams<typename Epilogue::Params, typename Format::Params> args) {
  const ScoreParams& params = args.score;
  const typename Epilogue::Params& epilogue = args.epilogue;
  static_assert(kHeads == 32 || kHeads == 64, "H must be 32 or 64");
  static_assert(kN % kHeads == 0 && kN / kHeads <= kMaxRowsPerGroup, "N = rows x H");
  using T = typename Epilogue::template Traits<kHeads, kN, kPaged>;
  using L = SharedLayout<kHeads, kN, T, Format>;
  extern __shared__ __align__(16) uint8_t smem[];
  // The 128-byte swizzle pattern is anchored to 1024-byte boundaries. On sm_90 a kernel without
  // static shared memory gets its dynamic shared memory right after the 1 KiB the system
  // reserves, so the base is 1024-aligned; ptxas does not see it (it builds the address from the
  // CTA's cluster rank) and an alignment fix-up was recomputed at every use (3 uniform
  // instructions per queued score in the emitting kernels). A different layout stops here.
  if (ptx::smem_address(smem) % 1024 != 0) __trap();
  // Broadcast from lane 0, the compiler knows the warpgroup is warp-uniform: the consumers' stage
  // arithmetic and wgmma descriptors then live in uniform registers (H64 prefill: 44 -> 13 R2UR
  // moves, none left in the step loop; 441 -> 406 SASS instructions per step; 4096 x 131072
  // 8.88 -> 8.40 ms in alternation; decode H64 b64 x 131072 298-299 -> 288-290 us once the
  // producer kept up with the consumers, though 7 % slower before that).
  const int warpgroup = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  constexpr bool kWideProducer = kPaged || T::kSideWarps > 0;
  constexpr int kProducerShare = Format::kRegisterKeys   ? kRegisterKeysProducerRegisters
                                 : Format::kConverts     ? kConvertingProducerRegisters
                                 : Format::kThreadGather ? kGatherProducerRegisters
                                                         : kProducerRegisters<kWideProducer>;
  constexpr int kConsumerShare = Format::kRegisterKeys   ? kRegisterKeysConsumerRegisters
                                 : Format::kConverts     ? kConvertingConsumerRegisters
                                 : Format::kThreadGather ? kGatherConsumerRegisters
                                                         : kConsumerRegisters<kWideProducer>;

  if (threadIdx.x == 0) {
    uint64_t* barriers = reinterpret_cast<uint64_t*>(smem + L::kBarriers);
    for (int s = 0; s < L::kStages; ++s) {
      ptx::mbarrier_init(&barriers[s], Format::kFillArrivals);  // full: producer (+ TMA bytes)
      ptx::mbarrier_init(&barriers[L::kStages + s], 128);       // empty: the consuming WG's threads
    }
    // q_empty: every consumer thread, and every side warp's lane.
    constexpr int kItemReaders = 128 * kConsumerGroups + 32 * T::kSideWarps;
    for (int b = 0; b < 2; ++b) {
      ptx::mbarrier_init(&barriers[2 * L::kStages + b], Format::kConverterArrivals);  // q_full
      ptx::mbarrier_init(&barriers[2 * L::kStages + 2 + b], kItemReaders);            // q_empty
    }
    Epilogue::template init_barriers<L>(barriers);
    // A converting format's raw slots: full (the loading lane with its copies' bytes), then
    // empty (every lane of the converting warp). Its stages' full barriers and q_full are then
    // completed by the converting lanes' arrivals, without bytes (producer.cuh, convert_ring).
    for (int b = 0; b < L::kRawBarrierCount; ++b) {
      ptx::mbarrier_init(&barriers[L::kRawBarriers + b],
                         b < L::kRawBarrierCount / 2 ? 1 : Format::kConverterArrivals);
    }
    Format::init_shared(smem + L::kRawEntries);
    ptx::fence_barrier_init();
    ptx::prefetch_tensor_map(&q_map);
    ptx::prefetch_tensor_map(&w_map);
    ptx::prefetch_tensor_map(&key_map);
    ptx::prefetch_tensor_map(&scale_map);
  }
  // Launched as a programmatic dependent (launch.h): nothing in global memory is touched before
  // the kernel before this one has completed.
  ptx::wait_prior_grids();
  __syncthreads();

  if (warpgroup == 0) {
    ptx::setmaxnreg_decrease<kProducerShare>();
    if constexpr (T::kSideWarps > 0) {
      const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0);
      if (warp > 0) {
        Epilogue::template side_warp<kHeads, kN, kPaged, L>(params, params.filter, epilogue, smem,
                                                            warp - 1);
        return;
      }
    }
    if constexpr (Format::kConverts || Format::kThreadGather) {
      produce<kHeads, kN, kPaged, L>(params, params.filter, &q_map, &w_map, &key_map, &scale_map,
                                     smem, args.format);
    } else {
      produce<kHeads, kN, kPaged, L>(params, params.filter, &q_map, &w_map, &key_map, &scale_map,
                                     smem);
    }
  } else {
    ptx::setmaxnreg_increase<kConsumerShare>();
    if constexpr (Format::kRegisterKeys) {
      consume<kHeads, kN, kPaged, Epilogue, L>(params, params.filter, epilogue, smem, warpgroup - 1,
                                               args.format);
    } else {
      consume<kHeads, kN, kPaged, Epilogue, L>(params, params.filter, epilogue, smem,
                                               warpgroup - 1);
    }
  }
}

// Launches one instantiation; each instantiations/*.cu file instantiates a few, so they build in
// parallel. (Format's default, KeysE4M3, is in the declaration, call.h.)
// Launches one instantiation with its whole parameter block.
template <int kHeads, int kN, bool kPaged, typename Epilogue, typename Format>
cudaError_t launch_instance(
    const ScoreMaps& maps,
    const KernelParams<typename Epilogue::Params, typename Format::Params>& args, int grid,
    cudaStream_t stream) {
  using T = typename Epilogue::template Traits<kHeads, kN, kPaged>;
  constexpr int kSharedBytes = SharedLayout<kHeads, kN, T, Format>::kBytes;
  auto* kernel = &score_kernel<kHeads, kN, kPaged, Epilogue, Format>;
  // Set on every launch (host-side, capture-safe): a cached "done" flag would be one symbol for
  // every copy of the library in a process (templates' statics are merged process-wide), and
  // a second copy's kernels would then launch without their opt-in.
  const cudaError_t configured =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
  if (configured != cudaSuccess) return configured;
  return launch_dependent(kernel, dim3(grid), dim3(kThreads), kSharedBytes, stream, 0, maps.q,
                          maps.w, maps.keys, maps.scales, args);
}

template <int kHeads, int kN, bool kPaged, typename Epilogue, typename Format>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params,
                         const typename Epilogue::Params& epilogue, int grid, cudaStream_t stream) {
  return launch_instance<kHeads, kN, kPaged, Epilogue, Format>(
      maps, KernelParams<typename Epilogue::Params>{params, epilogue}, grid, stream);
}

// The MXFP4 instantiations (call.h). Decode tiles of up to 192 columns convert their keys in the
// consumers, into the wgmma's A registers (format_mxfp4_registers.cuh); the 256-column tiles
// (prefill, decode next_n 4 at H = 64) keep the producer's converters (format_mxfp4.cuh): their
// accumulators and weights leave no room for 16 more registers.
template <int kN, bool kPaged>
using Mxfp4Format =
    std::conditional_t<kPaged && kN <= kMaxRegisterKeyColumns, KeysMXFP4Registers, KeysMXFP4>;
template <int kHeads, int kN, bool kPaged, typename Epilogue>
cudaError_t launch_score_mxfp4(const ScoreMaps& maps, const ScoreParams& params,
                               const typename Epilogue::Params& epilogue, const Mxfp4Params& format,
                               int grid, cudaStream_t stream) {
  return launch_instance<kHeads, kN, kPaged, Epilogue, Mxfp4Format<kN, kPaged>>(
      maps, KernelParams<typename Epilogue::Params, Mxfp4Params>{params, epilogue, format}, grid,
      stream);
}

// The sparse MXFP4 instantiations (format_mxfp4_sparse.cuh): N = H, one query row per work item.
template <int kHeads, int kBlock, bool kPagedSource, bool kConverterBits>
cudaError_t launch_score_sparse_mxfp4(const ScoreMaps& maps, const ScoreParams& params,
                                      const Mxfp4Params& format, int grid, cudaStream_t stream) {
  return launch_instance<kHeads, kHeads, true, StoreEpilogue,
                         SparseKeysMXFP4Registers<kBlock, kPagedSource, kConverterBits>>(
      maps, KernelParams<StoreEpilogue::Params, Mxfp4Params>{params, {}, format}, grid, stream);
}

// The sparse FP8 instantiations (format_sparse.cuh): N = H, one query row per work item.
template <int kHeads, int kBlock, bool kPagedSource>
cudaError_t launch_score_sparse(const ScoreMaps& maps, const ScoreParams& params,
                                const SparseKeyAddresses& source, int grid, cudaStream_t stream) {
  return launch_instance<kHeads, kHeads, true, StoreEpilogue, SparseKeysE4M3<kBlock, kPagedSource>>(
      maps, KernelParams<StoreEpilogue::Params, SparseKeyAddresses>{params, {}, source}, grid,
      stream);
}

}  // namespace flashindexer::cuda::scoring
