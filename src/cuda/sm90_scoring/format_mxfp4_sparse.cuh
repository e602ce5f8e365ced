// SPDX-License-Identifier: Apache-2.0
// Sparse MXFP4 keys (spec §8.5): the MXFP4 formats with their key tiles gathered block by block
// as the FP8 sparse format gathers them (SparseBlocks, format_sparse.cuh), 64 packed bytes and one
// scale word a key. A sparse call must give each key the bits the dense MXFP4 call gives it, so
// that the sparse consumer selects from the dense consumer's numbers; the two MXFP4 formats order
// the k of their wgmma differently (format_mxfp4_registers.cuh) and tensor-core sums may depend on
// that order, so each sparse call uses the form of the dense call it stands for:
//  * SparseKeysMXFP4 converts in the producer (KeysMXFP4): the packed workspace (prefill's dense
//    kernels are KeysMXFP4's) and the cache at H = 64, next_n 4 (a 256-column dense tile);
//  * SparseKeysMXFP4Registers converts in the consumers (KeysMXFP4Registers): every other decode
//    shape.
// Both leave the out-of-span vectors NaN, and the fix-up (mxfp4_fixup.cu) recomputes them through
// the same entries.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_mxfp4.cuh"
#include "cuda/sm90_scoring/format_mxfp4_registers.cuh"
#include "cuda/sm90_scoring/format_sparse.cuh"

namespace flashindexer::cuda::scoring {

// The converting form: the loader gathers a tile's blocks into a raw slot (its values, then the
// blocks' scale slots), and the converter reads each key's word through its block's slot.
template <int kBlock, bool kPagedSource>
struct SparseKeysMXFP4 : KeysMXFP4 {
  using Blocks = SparseBlocks<kBlock, kPagedSource, mxfp4::kPackedRowBytes>;
  static constexpr int kSparseBlock = kBlock;
  static constexpr int kCopies = Blocks::kCopies;
  static constexpr int kScaleBox = Blocks::kScaleBox;
  static constexpr uint32_t kTileCopyBytes = Blocks::kCopyBytes;
  static constexpr int kRawScaleBytes = Blocks::kScaleBytes;
  static constexpr int kRawSlotBytes = kRawValueBytes + kRawScaleBytes;
  template <int kN>
  static constexpr int kRawRegionBytes =
      kConverters* kRawSlots<kN>* kRawSlotBytes + 2 * kQStagingBytes<kN> + kRawEntryBytes;

  __device__ __forceinline__ static void note_block(float* scales, int c, int32_t entry) {
    Blocks::note_block(scales, c, entry);
  }
  __device__ __forceinline__ static void copy_block(uint8_t* keys, float* scales,
                                                    const CUtensorMap* key_map,
                                                    const CUtensorMap* scale_map, uint64_t* full,
                                                    int c, int32_t entry) {
    Blocks::copy_block(keys, scales, key_map, scale_map, full, c, entry);
  }
  __device__ __forceinline__ static void convert_tile(uint8_t* tile, float* tile_scales,
                                                      const uint8_t* raw, const uint2* tables,
                                                      const Mxfp4Params& fp, int lane) {
    const uint8_t* slots = raw + kRawValueBytes;
    KeysMXFP4::convert_tile_words(tile, tile_scales, raw, tables, fp, lane,
                                  [&](int key) { return Blocks::word(slots, key); });
  }
};

// The register form, from the paged cache: a stage holds the gathered values and the blocks'
// scale slots, and each consumer thread reads its two rows' words through their slots.
template <int kBlock>
struct SparseKeysMXFP4Registers : KeysMXFP4Registers {
  using Blocks = SparseBlocks<kBlock, true, mxfp4::kPackedRowBytes>;
  static constexpr int kSparseBlock = kBlock;
  static constexpr int kCopies = Blocks::kCopies;
  static constexpr int kScaleBox = Blocks::kScaleBox;
  static constexpr uint32_t kTileCopyBytes = Blocks::kCopyBytes;
  static constexpr int kTileScaleBytes = Blocks::kScaleBytes;

  __device__ __forceinline__ static void note_block(float* scales, int c, int32_t entry) {
    Blocks::note_block(scales, c, entry);
  }
  __device__ __forceinline__ static void copy_block(uint8_t* keys, float* scales,
                                                    const CUtensorMap* key_map,
                                                    const CUtensorMap* scale_map, uint64_t* full,
                                                    int c, int32_t entry) {
    Blocks::copy_block(keys, scales, key_map, scale_map, full, c, entry);
  }
  __device__ __forceinline__ static void load_operand(Operand& op, const uint8_t* tile,
                                                      const uint8_t* tile_scales,
                                                      const uint2* tables, const Mxfp4Params& fp,
                                                      int key_row, int lane) {
    KeysMXFP4Registers::load_operand_words(
        op, tile, tables, fp, key_row, lane,
        [&](int row) { return Blocks::word(tile_scales, row); });
  }
};

}  // namespace flashindexer::cuda::scoring
