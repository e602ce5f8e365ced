// SPDX-License-Identifier: Apache-2.0
// Sparse keys (spec §8.5): FP8 e4m3 keys gathered block by block, as a policy of the scoring
// kernel. A work item is one query row and its "keys" are the row's sparse columns: column
// j * kBlock + o is key o of the row's j-th sparse block, wherever that block lies. Each 64-key
// tile is therefore kTileKeys / kBlock copies of kBlock contiguous keys (and their scales), one
// per sparse block, issued by that many producer lanes at once. Everything after the copies (the
// wgmma, the head sums, the epilogue) is KeysE4M3's, so a key's score has the bits the dense
// kernels give it: the sparse and the dense consumer select from the same numbers.
//
// A block's entry (the producer reads it from ScoreParams::block_table, one row of entries per
// query row) names its first key: the packed workspace row (kPagedSource false), or cache page
// and row as page << kSparseRowBits | row (kPagedSource true; pages hold at most 128 keys).
// Entries must name keys inside the tensor (a box wholly outside it stopped the kernel with an
// illegal instruction on an H200): the rows metadata pads a row's last tile with its last
// block, whose extra columns lie past the row's end.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_e4m3.cuh"

namespace flashindexer::cuda::scoring {

// Bits of a paged entry that hold the row in its page (page sizes are at most 128 keys).
constexpr int kSparseRowBits = 7;

// The gathering of sparse blocks, shared by the FP8 and the MXFP4 sparse formats: block c of a
// tile lands after the c blocks before it (kRowBytes a key: 128 for e4m3, 64 for packed E2M1),
// its 32-bit scales (fp32, or an MXFP4 key's word of four UE8M0) in a 128-byte slot of its own.
template <int kBlock, bool kPagedSource, int kRowBytes>
struct SparseBlocks {
  static_assert(kBlock == 8 || kBlock == 16, "sparse blocks of 8 or 16 keys");
  static constexpr int kCopies = kTileKeys / kBlock;  // sparse blocks per key tile
  // A tensor copy lands on a 128-byte boundary of shared memory, so each block's scales get a
  // 128-byte slot of their own: a stage holds kCopies slots.
  static constexpr int kScaleSlotWords = 128 / 4;
  static constexpr int kScaleBytes = kCopies * 128;
  // The scales' box, in words. A copy's first element must lie on a 16-byte boundary of global
  // memory (an unaligned start stopped the kernel with an illegal instruction on an H200), and a
  // packed block starts at any key (ks is any row): its copy starts at the aligned key at or
  // before the block's first, entry & ~3, and brings kBlock + 4 scales, the block's place in
  // them being entry & 3 (note_block keeps it). A cache page's blocks start at multiples of
  // kBlock keys of an aligned page: their copies are exact.
  static constexpr int kScaleBox = kPagedSource ? kBlock : kBlock + 4;
  static_assert(kScaleBox < kScaleSlotWords, "a slot holds the box and a word after it");
  static_assert(2 * kCopies <= 32, "the tile's places fit one word");
  // What the copies of one tile bring (the stage's full barrier expects it).
  static constexpr uint32_t kCopyBytes = kTileKeys * kRowBytes + kCopies * kScaleBox * 4;

  // Before the copies, called by the producer warp's lanes 0 .. kCopies - 1 (lane c: block c):
  // the packed form records the tile's places, 2 bits per block, in the last word of slot 0.
  // Lane 0 alone stores the word, so that its own arrive on the stage's full barrier publishes
  // it: the notes of lanes 1 .. kCopies - 1, stored by themselves and ordered only by a
  // __syncwarp, were races to racecheck on the H200.
  __device__ __forceinline__ static void note_block(void* scales, int c, int32_t entry) {
    if constexpr (!kPagedSource) {
      const uint32_t places =
          __reduce_or_sync((1u << kCopies) - 1, static_cast<uint32_t>(entry & 3) << (2 * c));
      if (c == 0) static_cast<uint32_t*>(scales)[kScaleSlotWords - 1] = places;
    }
  }

  // Block `c` of a tile, whose entry is `entry`: its keys after the c blocks before it (every
  // copy starts on a 512-byte boundary), its scales in slot c.
  __device__ __forceinline__ static void copy_block(uint8_t* keys, void* scales,
                                                    const CUtensorMap* key_map,
                                                    const CUtensorMap* scale_map, uint64_t* full,
                                                    int c, int32_t entry) {
    uint8_t* dst = keys + c * kBlock * kRowBytes;
    uint32_t* slot = static_cast<uint32_t*>(scales) + c * kScaleSlotWords;
    if constexpr (kPagedSource) {
      const int32_t page = entry >> kSparseRowBits;
      const int32_t row = entry & ((1 << kSparseRowBits) - 1);
      ptx::tma_load_3d(dst, key_map, full, 0, row, page);
      ptx::tma_load_2d(slot, scale_map, full, row, page);
    } else {
      ptx::tma_load_2d(dst, key_map, full, 0, entry);
      ptx::tma_load_1d(slot, scale_map, full, entry & ~3);
    }
  }
  // The word of key row `key_row` of a tile's scales: in its block's slot, after the block's
  // place. A step without its second tile reads the first tile's stage (consumer.cuh), so the
  // place word read is always one the producer stored.
  __device__ __forceinline__ static uint32_t word(const void* tile_scales, int key_row) {
    const auto* words = static_cast<const uint32_t*>(tile_scales);
    const int block = key_row / kBlock;
    int place = 0;
    if constexpr (!kPagedSource) place = (words[kScaleSlotWords - 1] >> (2 * block)) & 3;
    return words[block * kScaleSlotWords + place + key_row % kBlock];
  }
};

// A format `Base` whose key tiles are gathered block by block: what every sparse format shares
// (its stage's scale slots, the producer's notes and copies); the scale reads are the format's.
template <typename Base, int kBlock, bool kPagedSource, int kRowBytes>
struct SparseGathered : Base {
  using Blocks = SparseBlocks<kBlock, kPagedSource, kRowBytes>;
  static constexpr int kSparseBlock = kBlock;
  static constexpr int kCopies = Blocks::kCopies;
  static constexpr int kScaleBox = Blocks::kScaleBox;
  static constexpr int kTileScaleBytes = Blocks::kScaleBytes;
  static constexpr uint32_t kTileCopyBytes = Blocks::kCopyBytes;
  __device__ __forceinline__ static void note_block(float* scales, int c, int32_t entry) {
    Blocks::note_block(scales, c, entry);
  }
  __device__ __forceinline__ static void copy_block(uint8_t* keys, float* scales,
                                                    const CUtensorMap* key_map,
                                                    const CUtensorMap* scale_map, uint64_t* full,
                                                    int c, int32_t entry) {
    Blocks::copy_block(keys, scales, key_map, scale_map, full, c, entry);
  }
};

template <int kBlock, bool kPagedSource>
struct SparseKeysE4M3 : SparseGathered<KeysE4M3, kBlock, kPagedSource, kHeadDim> {
  using Blocks = SparseBlocks<kBlock, kPagedSource, kHeadDim>;
  __device__ __forceinline__ static float scale(const uint8_t* tile_scales, int key_row) {
    return __uint_as_float(Blocks::word(tile_scales, key_row));
  }
};

}  // namespace flashindexer::cuda::scoring
