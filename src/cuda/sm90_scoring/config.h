// SPDX-License-Identifier: Apache-2.0
// The scoring kernel's fixed shape, tiles, warp roles, register split and shared-memory budget,
// each with its reason. Shared by the launch code (C++) and the kernel (CUDA). What depends on
// the epilogue (steps per tile, its shared bytes) is in its Traits (store_epilogue.cuh, and the
// fused indexer's emit_epilogue.cuh); what depends on the key format in format_e4m3.cuh.
#pragma once

#include <cstdint>

namespace flashindexer::cuda::scoring {

constexpr int kHeadDim = 128;       // D; one 128-byte swizzled row per key and per (row, head)
constexpr int kTileKeys = 64;       // keys per pipeline stage = wgmma M
constexpr int kConsumerGroups = 2;  // math warpgroups; they take alternate key tiles
constexpr int kThreads = 128 * (1 + kConsumerGroups);
constexpr int kMaxRowsPerGroup = 8;  // query rows sharing one Q tile (256 / H for H = 32)
constexpr int kProducerWarps = 4;    // the producer warpgroup's warps share the per-tile work
static_assert(kProducerWarps == 2 * kConsumerGroups, "two producer warps per consumer warpgroup");

// The Q-tile layout (consumer.cuh, TileColumn): with 4 or 8 query rows per tile (prefill at
// H = 32 and 64; decode next_n 4 at H = 64, 3-4 at H = 32) the tile is loaded permuted so that
// each lane holds every head of its own rows; with fewer rows, each row is spread over a quad of
// lanes. The host encodes the Q map to match (launch.cu).
template <int kHeads, int kColumns>
inline constexpr bool kLaneOwnedRows = (kColumns / kHeads) % 4 == 0;

// Register split (65536 per SM = 128 producer + 256 consumer threads): the paged producer needs
// more for its block-table window, and so do the emitters of the fused indexer's prefill scan;
// the storing prefill consumers need more for H = 32 (8 rows of sums), and the emitting ones,
// without the queue work, do not. The CTA only owns the registers it was launched with (168 per
// thread, the most that 65536 / 384 rounds down to): a split above that makes the consumers'
// setmaxnreg.inc wait forever (48 / 232, tried for the emission code, hung decode on the H200).
// At 224 the emitting paged N = 256 consumer spilled 20-28 bytes until its queue addressing
// became warp-uniform (CandidateQueue); no scoring kernel spills now (tests/tools/check_sass.py).
template <bool kWideProducer>
inline constexpr int kProducerRegisters = kWideProducer ? 56 : 40;
template <bool kWideProducer>
inline constexpr int kConsumerRegisters = kWideProducer ? 224 : 232;
constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
static_assert(128 * kProducerRegisters<true> + 256 * kConsumerRegisters<true> <=
                  kThreads * kLaunchRegisters,
              "paged and emitting register split exceeds the CTA's registers");
static_assert(128 * kProducerRegisters<false> + 256 * kConsumerRegisters<false> <=
                  kThreads * kLaunchRegisters,
              "prefill register split exceeds the CTA's registers");
// A converting format's producer (format_mxfp4.cuh): two warps load, two convert. Each role fits
// 56 registers on its own (with both in every warp, the producer spilled 56-96 bytes at 56 and
// 72; at 72 / 216 the H = 32 prefill consumers spilled 8), and the consumers keep the paged 224.
constexpr int kConvertingProducerRegisters = 56;
constexpr int kConvertingConsumerRegisters = 224;
static_assert(128 * kConvertingProducerRegisters + 256 * kConvertingConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "converting register split exceeds the CTA's registers");

// A gathering format's producer (format_sparse.cuh): the lanes' block entries and copy addresses
// spilled 8-20 bytes at 56; its consumers (N = H) need far fewer than 216.
constexpr int kGatherProducerRegisters = 72;
constexpr int kGatherConsumerRegisters = 216;
static_assert(128 * kGatherProducerRegisters + 256 * kGatherConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "gathering split exceeds the CTA's registers");

// The widest Q tile whose consumers convert MXFP4 keys in registers (kernel.cuh, Mxfp4Format):
// 256 columns' accumulators and weights leave no room for the A registers.
constexpr int kMaxRegisterKeyColumns = 192;
// Register keys (format_mxfp4_registers.cuh): the paged loader with the Q conversion in warp 0
// spilled 8 bytes at 56; the consumers, with 16 A registers a tile, fit 216.
constexpr int kRegisterKeysProducerRegisters = 64;
constexpr int kRegisterKeysConsumerRegisters = 216;
static_assert(128 * kRegisterKeysProducerRegisters + 256 * kRegisterKeysConsumerRegisters <=
                  kThreads * kLaunchRegisters,
              "register-keys split exceeds the CTA's registers");

// Shared memory: as many key stages as fit next to the two Q buffers (more bytes in flight is
// what decode, bound by reading the cache, needs most); layout.cuh lays them out.
constexpr int kSharedBudget = 220 * 1024;

// The wgmma of one tile is issued in kParts column parts of kN / kParts, so that the head sums of
// the first part run while the tensor cores compute the next one.
template <int kN>
inline constexpr int kPartsFor = kN == 256 ? 2 : 1;

// A consumer step is kTilesPerStep consecutive key tiles of one item. Small Q tiles (decode)
// take two tiles per step, so each warpgroup keeps two tiles' wgmma and epilogue in flight:
// decode is bound by latency, not by the tensor cores. (An epilogue may take more: the
// emitting N <= 64 scans take four, emit_epilogue.cuh.)
template <int kN>
inline constexpr int kTilesPerStepFor = kN <= 128 ? 2 : 1;

}  // namespace flashindexer::cuda::scoring
