// SPDX-License-Identifier: Apache-2.0
// Sparse keys (spec §8.5): keys gathered block by block, as a policy of the scoring kernel. A
// work item is one query row and its "keys" are the row's sparse columns: column j * kBlock + o is
// key o of the row's j-th sparse block, wherever that block lies. Each 64-key tile is therefore
// kTileKeys / kBlock blocks of kBlock contiguous keys (and their scales). Everything after the
// copies (the wgmma, the head sums, the epilogue) is the dense format's, so a key's score has the
// bits the dense kernels give it: the sparse and the dense consumer select from the same numbers.
//
// A block's entry (the producer reads it from ScoreParams::block_table, one row of entries per
// query row) names its first key: the packed workspace row (kPagedSource false), or cache page
// and row as page << kSparseRowBits | row (kPagedSource true; pages hold at most 128 keys).
// Entries must name keys inside the tensor: the rows metadata pads a row's last tile with its last
// block, whose extra columns lie past the row's end.
//
// Two ways of bringing a tile in. The FP8 format (SparseKeysE4M3) has the producer warp's lanes
// gather it with 16-byte cp.async into the 128-byte-swizzled stage: a 64-key tile by TMA was 16
// tensor copies (keys and scales of 8 blocks) issued one lane after another, and the H = 32 prefill
// consumer (4096 rows x 2048 blocks) then waited on its producer for half its time (ncu on the
// H200). The MXFP4 register formats (format_mxfp4_sparse.cuh) keep the TMA blocks (SparseBlocks).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_e4m3.cuh"
#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {

// Bits of a paged entry that hold the row in its page (page sizes are at most 128 keys).
constexpr int kSparseRowBits = 7;

// The TMA gathering of sparse blocks, the MXFP4 sparse formats': block c of a tile lands after the
// c blocks before it (kRowBytes a key: 64 for packed E2M1), its 32-bit scales (an MXFP4 key's
// word of four UE8M0) in a 128-byte slot of its own. One lane copies each block.
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

// A format `Base` whose key tiles are gathered block by block by TMA: what the MXFP4 sparse
// formats share (their stages' scale slots, the producer's notes and copies); the scale reads are
// the format's.
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

// A producer warp's block entries for its coming tiles of one work item. A warp's own tiles of an
// item are kStride apart (produce: two warps share a consumer's places, and the consumers' steps of
// kTilesPerStep tiles alternate), so lane l holds the entry of block l % kCopies of tile
// base + kStride (l / kCopies): 32 / kCopies tiles a load. The window after it is loaded when the
// warp enters this one, so that load's latency passes behind this window's copies; a tile in
// neither (a new item, or the other parity after an item's short last step) loads afresh.
template <int kCopies, int kStride>
struct EntryWindow {
  static constexpr int kSlots = 32 / kCopies;
  static constexpr int kSpan = kSlots * kStride;  // tiles from one window's base to the next's
  int64_t group = -1;
  int32_t base = 0;
  int32_t current = 0;
  int32_t next = 0;

  __device__ __forceinline__ static int32_t load(const ScoreParams& p, int64_t group,
                                                 int32_t first_tile, int lane) {
    // Entries past the row's are never copied (a tile never reaches past them); the bound keeps
    // the window's read inside the entries.
    const int32_t block = (first_tile + kStride * (lane / kCopies)) * kCopies + lane % kCopies;
    return block < p.table_pages ? p.block_table[group * p.table_stride_b + block] : 0;
  }
  // Moves the window onto `tile` of `group` (warp-uniform) and returns its slot in `current`.
  __device__ __forceinline__ int slot(const ScoreParams& p, int64_t g, int32_t tile, int lane) {
    const int32_t ahead = tile - base;
    if (g == group && ahead >= 0 && ahead % kStride == 0 && ahead < 2 * kSpan) {
      if (ahead < kSpan) return ahead / kStride;
      current = next;
      base += kSpan;
      next = load(p, g, base + kSpan, lane);
      return (ahead - kSpan) / kStride;
    }
    group = g;
    base = tile;
    current = load(p, g, tile, lane);
    next = load(p, g, tile + kSpan, lane);
    return 0;
  }
};

// FP8 e4m3 sparse keys, gathered by the producer warp's lanes: chunk lane + 32 i (i < 16) of the
// tile's 512 16-byte chunks is key row lane / 8 + 4 i, bytes 16 (lane % 8) on; each warp-wide copy
// reads four rows of one block, 512 contiguous bytes. Lanes l and l + 32 copy key row l's scale.
// Every lane's copies arrive on the stage's full barrier as they land (kFillArrivals), and the
// consumers fence the async proxy before their wgmma reads what the generic proxy wrote.
template <int kBlock, bool kPagedSource>
struct SparseKeysE4M3 : KeysE4M3 {
  static_assert(kBlock == 8 || kBlock == 16, "sparse blocks of 8 or 16 keys");
  static constexpr int kSparseBlock = kBlock;
  static constexpr int kCopies = kTileKeys / kBlock;  // sparse blocks per key tile
  static constexpr bool kThreadGather = true;
  using Params = SparseKeyAddresses;
  static constexpr int kFillArrivals = 32;
  template <int kStride>
  using Window = EntryWindow<kCopies, kStride>;

  // The tile whose entries are lanes slot kCopies .. slot kCopies + kCopies - 1 of `window`
  // (EntryWindow::current) into the stage `keys` / `scales`, completing `full`.
  __device__ __forceinline__ static void gather(uint8_t* keys, float* scales, uint64_t* full,
                                                int32_t window, int slot,
                                                const SparseKeyAddresses& src, int lane) {
    int32_t entry[kCopies];
#pragma unroll
    for (int b = 0; b < kCopies; ++b) {
      entry[b] = __shfl_sync(0xffffffffu, window, slot * kCopies + b);
    }
    if constexpr (kPagedSource) {
      copy_keys<false>(keys, entry, src, lane);
    } else {
      // Only a tile with a block that reaches past the workspace's last key (its last block, if
      // any) clamps its rows (packed_row).
      int32_t last = entry[0];
#pragma unroll
      for (int b = 1; b < kCopies; ++b) last = max(last, entry[b]);
      if (last <= src.num_keys - kBlock) {
        copy_keys<false>(keys, entry, src, lane);
      } else {
        copy_keys<true>(keys, entry, src, lane);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = lane + 32 * h;
      const int32_t mine = __shfl_sync(0xffffffffu, window, slot * kCopies + row / kBlock);
      ptx::cp_async_4(scales + row, scale_of(src, mine, row % kBlock));
    }
    ptx::cp_async_arrive_noinc(full);
  }

  // The lane's 16 chunks of the tile whose blocks start at `entry`.
  template <bool kClamped>
  __device__ __forceinline__ static void copy_keys(uint8_t* keys, const int32_t (&entry)[kCopies],
                                                   const SparseKeyAddresses& src, int lane) {
    const int col = lane % 8;
#pragma unroll
    for (int i = 0; i < kTileKeys / 4; ++i) {
      const int row = lane / 8 + 4 * i;  // in block 4 i / kBlock (lane / 8 < 4)
      // The 128-byte swizzle: chunk c of row r at 16 (c ^ r % 8), the stage being 1024-aligned.
      uint8_t* dst = keys + row * kHeadDim + ((col ^ (row % 8)) << 4);
      ptx::cp_async_16(dst,
                       key_row<kClamped>(src, entry[4 * i / kBlock], row % kBlock) + (col << 4));
    }
  }
  template <bool kClamped>
  __device__ __forceinline__ static const uint8_t* key_row(const SparseKeyAddresses& src,
                                                           int32_t entry, int in_block) {
    if constexpr (kPagedSource) {
      const int32_t page = entry >> kSparseRowBits;
      const int32_t row = (entry & ((1 << kSparseRowBits) - 1)) + in_block;
      return src.keys + page * src.page_stride + row * kHeadDim;
    } else if constexpr (kClamped) {
      return src.keys + packed_row(src, entry, in_block) * src.key_stride;
    } else {
      return src.keys + (static_cast<int64_t>(entry) + in_block) * src.key_stride;
    }
  }
  // A packed block's row `in_block`. The last block of the workspace may reach past its keys,
  // into columns past its row's end: those copy the last key instead (TMA's boxes were filled with
  // zeros there; these columns are never stored).
  __device__ __forceinline__ static int64_t packed_row(const SparseKeyAddresses& src, int32_t entry,
                                                       int in_block) {
    return min(static_cast<int64_t>(entry) + in_block, src.num_keys - 1);
  }
  __device__ __forceinline__ static const float* scale_of(const SparseKeyAddresses& src,
                                                          int32_t entry, int in_block) {
    if constexpr (kPagedSource) {
      const int32_t page = entry >> kSparseRowBits;
      const int32_t row = (entry & ((1 << kSparseRowBits) - 1)) + in_block;
      return reinterpret_cast<const float*>(src.keys + page * src.page_stride +
                                            src.page_size * kHeadDim) +
             row;
    } else {
      return src.scales + packed_row(src, entry, in_block);
    }
  }
};

}  // namespace flashindexer::cuda::scoring
