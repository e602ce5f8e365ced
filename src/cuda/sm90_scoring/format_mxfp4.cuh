// SPDX-License-Identifier: Apache-2.0
// MXFP4 operands (spec §2.4, §3.3, §4.3) for the scoring kernel: E2M1 values with one UE8M0 scale
// per 32 of them, for the queries and the keys. Hopper has no FP4 tensor cores, so the producer
// warpgroup turns both into e4m3 in shared memory, and the consumers run KeysE4M3's code as is.
//
// Key tiles. Producer warp 0 streams every tile by TMA into raw slots (4 KiB of packed values and
// 256 B of scale words each), and producer warps 1-3 convert them into the normal key stages
// (8 KiB of swizzled e4m3 and a fp32 scale per key, KeysE4M3's stage), each arriving on the
// stage's full barrier; stage s is warp 1 + s % 3's, through a ring of its own (producer.cuh,
// RawRing, which also argues that no wait closes a cycle). The consumers' critical path is the
// FP8 kernel's: no conversion, no extra barrier.
//
// Queries. Producer warp 0 brings an item's packed Q rows by TMA into a staging buffer through a
// slot of ring 0, whose converter writes them into the Q tile (the FP8 tile's layout: permuted for
// lane-owned rows, 128-byte swizzle), folds each (row, head)'s remaining power of two into its
// weight and arrives on the item's q_full. Once per work item: a few hundred words.
//
// The scale scheme. A 128-value vector has four block scales 2^(s_b - 127). Every E2M1 value
// m 2^e (m in {1, 1.5}, e in -1..2) times 2^d is exactly an e4m3 value for d in [-8, 6] (d = -8
// reaches the smallest subnormal 2^-9, d = 6 puts 6 at 384 <= 448). The vector's reference
// exponent ref is the largest s_b over its blocks holding a non-zero value; block b is written
// shifted by d_b = s_b - ref + 6, and one power of two is left per vector: 2^(ref - 127) for a
// query (folded into its weight) and 2^(ref - 139) for a key (its scale; the two 2^6 go there).
// That is exact whenever every non-zero block lies within 14 binades of its vector's largest.
//
// Vectors outside the span are not computed in the wgmma flow: the converter writes NaN as the
// key's scale (or the query column's weight), so every logit that vector enters comes out NaN,
// and after the kernel a separate fix-up kernel (mxfp4_fixup.cu) recomputes exactly the NaN
// logits of each row's visible range from the raw bytes, in one fixed order. That kernel is
// simple (one warp per logit, no barriers besides the warp's), so a fallback cannot stall the
// pipeline; a logit that is NaN for any other reason is recomputed to what the data give. The
// converters also set a sticky device flag, so that the fix-up skips its scan until some call
// on the device has flagged a vector.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_e4m3.cuh"
#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {
namespace mxfp4 {

constexpr int kBlocks = 4;                          // UE8M0 scales per 128-value vector
constexpr int kBlockBytes = 16;                     // 32 E2M1 values share one scale
constexpr int kPackedRowBytes = kHeadDim / 2;       // 64 bytes of packed values per vector
constexpr int kMaxShift = 6;                        // 6 x 2^6 = 384 <= 448, e4m3's largest
constexpr int kMinShift = -8;                       // 0.5 x 2^-8 = 2^-9, e4m3's smallest subnormal
constexpr int kQueryScaleBias = 127;                // a query keeps 2^(ref - 127)
constexpr int kKeyScaleBias = 127 + 2 * kMaxShift;  // a key takes both vectors' 2^-6
constexpr uint32_t kFlagBits = 0x7FC00000u;  // the quiet NaN that marks an out-of-span vector

// 2^e as a float for e in [-149, 127] (subnormal below -126), without a branch.
__device__ __forceinline__ float power_of_two(int e) {
  const uint32_t normal = static_cast<uint32_t>(max(e + 127, 0)) << 23;
  const uint32_t subnormal = 1u << static_cast<uint32_t>(max(e + 149, 0) & 31);
  return __uint_as_float(e >= -126 ? normal : subnormal);
}

// The e4m3 bytes of the E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} times 2^d: codes 0-3 in x,
// 4-7 in y (little-endian), for __byte_perm. For d >= -5 all are normal and the shift only adds d
// to the exponent fields; -6..-8 reach the subnormals, whose bytes are constants. Selects only:
// the warp never diverges here. d is clamped to [-8, 6]; a block shifted below -8 is either zero
// (byte 0 is 0 in every table) or flags its vector.
__device__ __forceinline__ uint2 magnitude_table(int d) {
  d = min(max(d, kMinShift), kMaxShift);
  const uint32_t add = static_cast<uint32_t>(8 * d);
  uint2 table{0x3C383000u + add * 0x01010100u, 0x4C484440u + add * 0x01010101u};
  table.x = d == -6 ? 0x0C080400u : table.x;  // 2^-7 is the subnormal 4 x 2^-9
  table = d == -7 ? make_uint2(0x06040200u, 0x14100C08u) : table;
  table = d == -8 ? make_uint2(0x03020100u, 0x0C080604u) : table;
  return table;
}

// Eight E2M1 codes (one packed word, element 2i in the low nibble of byte i) as eight e4m3 bytes
// (x: elements 0-3, y: 4-7). The magnitudes come through the table (the low 16 bits of a selector
// pick 4 bytes; bit 3 of each nibble cleared: no sign replication). The signs need no selector
// built per word: bit 7 of byte i is element 2i + 1's sign in the packed word and element 2i's
// in the word shifted left by 4, so a permute of those two words with a constant selector puts
// element k's sign at bit 7 of byte k, and one LOP3 ORs those bits into the magnitudes. A byte is
// its magnitude with bit 7 set by its sign (-0 is 0x80), for any table. 9 instructions per 8
// values (12 when a second permute picked each byte from the magnitudes or the magnitudes | 0x80,
// 17 through __byte_perm, which masked every selector first): the conversion is the largest work
// per tile of the producer and of the register-keys consumers.
__device__ __forceinline__ uint2 expand_word(uint32_t packed, uint2 table) {
  constexpr uint32_t kSignBits = 0x80808080u;
  constexpr uint32_t kSignsOfX = 0x5140u;  // bytes: even 0, packed 0, even 1, packed 1
  constexpr uint32_t kSignsOfY = 0x7362u;  // bytes: even 2, packed 2, even 3, packed 3
  const uint32_t codes = packed & 0x77777777u;
  const uint32_t magnitude_x = ptx::byte_permute(table.x, table.y, codes);
  const uint32_t magnitude_y = ptx::byte_permute(table.x, table.y, codes >> 16);
  const uint32_t even = packed << 4;  // bit 7 of byte i: element 2i's sign
  const uint32_t signs_x = ptx::byte_permute(even, packed, kSignsOfX);
  const uint32_t signs_y = ptx::byte_permute(even, packed, kSignsOfY);
  return {magnitude_x | (signs_x & kSignBits), magnitude_y | (signs_y & kSignBits)};
}

// Whether a block of 32 packed values holds a non-zero one (the sign bits do not count: -0 is 0).
__device__ __forceinline__ bool nonzero_block(const uint4& block) {
  return ((block.x | block.y | block.z | block.w) & 0x77777777u) != 0;
}

// For four consecutive lanes holding a vector's four blocks: whether any of them is a non-zero
// block shifted below the span (the whole warp calls it).
__device__ __forceinline__ bool quad_out_of_span(bool nonzero, int shift) {
  const uint32_t out = __ballot_sync(0xffffffffu, nonzero && shift < kMinShift);
  return ((out >> (threadIdx.x % 32 & ~3u)) & 0xFu) != 0;
}

// A vector's remaining power of two, 2^(ref - bias), or the flag when it is out of span.
__device__ __forceinline__ float remaining_scale(int ref, bool flagged, int bias) {
  return flagged ? __uint_as_float(kFlagBits) : power_of_two(ref - bias);
}

// One block's part of its vector's conversion, for four consecutive lanes (lane % 4 = block b)
// holding the vector's four blocks: the vector's reference exponent over its non-zero blocks (0
// when all are zero), this block's shift, and whether a non-zero block is out of span.
struct BlockShift {
  int ref;
  int shift;
  bool flagged;

  __device__ __forceinline__ BlockShift(const uint4& block, uint32_t scale_word, int b) {
    const int scale = static_cast<int>((scale_word >> (8 * b)) & 0xFFu);
    const bool nonzero = nonzero_block(block);
    int top = nonzero ? scale : -1;
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 2));
    ref = max(top, 0);
    shift = scale - ref + kMaxShift;
    flagged = quad_out_of_span(nonzero, shift);
  }
  __device__ __forceinline__ float remaining_scale(int bias) const {
    return mxfp4::remaining_scale(ref, flagged, bias);
  }
};

// The magnitude tables of every shift kMinShift..kMaxShift, written once per CTA (thread 0, before
// the kernel's first __syncthreads): a converting lane reads its block's table with one shared load
// instead of selecting it (15 instructions a block).
constexpr int kTables = kMaxShift - kMinShift + 1;
__device__ __forceinline__ void write_tables(uint2* tables) {
  for (int d = kMinShift; d <= kMaxShift; ++d) tables[d - kMinShift] = magnitude_table(d);
}
__device__ __forceinline__ uint2 table_for(const uint2* tables, int shift) {
  return tables[min(max(shift, kMinShift), kMaxShift) - kMinShift];
}

// Writes one block (32 values) as e4m3 into row `row` of a 128-byte-swizzled tile: the layout TMA
// writes with CU_TENSOR_MAP_SWIZZLE_128B (16-byte chunk c of row r at chunk c ^ (r % 8)), which
// the FP8 consumers' wgmma descriptors read.
__device__ __forceinline__ void store_block(uint8_t* tile, int row, int b, const uint4& block,
                                            uint2 table) {
  const uint2 e0 = expand_word(block.x, table);
  const uint2 e1 = expand_word(block.y, table);
  const uint2 e2 = expand_word(block.z, table);
  const uint2 e3 = expand_word(block.w, table);
  uint8_t* base = tile + row * kHeadDim;
  *reinterpret_cast<uint4*>(base + (((2 * b) ^ (row & 7)) * 16)) =
      make_uint4(e0.x, e0.y, e1.x, e1.y);
  *reinterpret_cast<uint4*>(base + (((2 * b + 1) ^ (row & 7)) * 16)) =
      make_uint4(e2.x, e2.y, e3.x, e3.y);
}

// The same block in the k order of register keys (format_mxfp4_registers.cuh): its element
// 8 j + 4 h + i (word j, half h of that word's e4m3 bytes) at k = 32 j + 16 h + 4 b + i, which is
// byte 4 b of the row's 16-byte chunk 2 j + h. A dot product over all 128 k is the same sum in
// any order of k that both operands share; this one puts a key's block b in lane b % 4 of the
// wgmma's A fragment (the quad's columns 4 (lane % 4) + {0..3} and 16 + 4 (lane % 4) + {0..3} of
// every k-step).
__device__ __forceinline__ void store_block_permuted(uint8_t* tile, int row, int b,
                                                     const uint4& block, uint2 table) {
  const uint32_t words[4] = {block.x, block.y, block.z, block.w};
  uint8_t* base = tile + row * kHeadDim + 4 * b;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint2 e = expand_word(words[j], table);
    *reinterpret_cast<uint32_t*>(base + (((2 * j) ^ (row & 7)) * 16)) = e.x;
    *reinterpret_cast<uint32_t*>(base + (((2 * j + 1) ^ (row & 7)) * 16)) = e.y;
  }
}

// The sticky device flag (Mxfp4Params::out_of_span): a plain store, visible to the fix-up kernel,
// which runs after this kernel has completed.
__device__ __forceinline__ void note_out_of_span(const Mxfp4Params& fp) {
  *reinterpret_cast<volatile int*>(fp.out_of_span) = 1;
}

}  // namespace mxfp4

struct KeysMXFP4 : KeysE4M3 {
  using Params = Mxfp4Params;
  static constexpr bool kConverts = true;
  static constexpr bool kConvertsKeys = true;
  // A raw slot: the tile's packed values, then its scale words (one per key).
  static constexpr int kRawValueBytes = kTileKeys * mxfp4::kPackedRowBytes;  // 4 KiB
  static constexpr int kRawScaleBytes = kTileKeys * 4;
  static constexpr int kRawSlotBytes = kRawValueBytes + kRawScaleBytes;
  static constexpr uint32_t kLoadBytes = kRawSlotBytes;  // what the copies of one tile bring
  // Raw slots of each converting warp's ring (three rings): 4 for decode (12 tiles, 52 KiB, in
  // flight per CTA besides the key stages: decode is bound by the cache read), 2 for the N = 256
  // prefill tiles, whose Q tiles take the room.
  static constexpr int kConverters = kProducerWarps - 1;
  template <int kN>
  static constexpr int kRawSlots = kN == 256 ? 2 : 4;
  // The packed Q tile (kN vectors of 64 bytes) of each of the two Q buffers.
  template <int kN>
  static constexpr int kQStagingBytes = kN* mxfp4::kPackedRowBytes;
  // The rings' slots, the two Q staging buffers, then a 4-byte entry per slot in 128 bytes and
  // the magnitude tables (mxfp4::write_tables) in the next 128 (so that the regions after them
  // keep the 128-byte alignment of TMA destinations).
  static constexpr int kRawEntryBytes = 256;
  static constexpr int kTablesOffset = 128;  // from the entries
  static_assert(mxfp4::kTables * 8 <= kRawEntryBytes - kTablesOffset, "the tables fit");
  template <int kN>
  static constexpr int kRawRegionBytes =
      kConverters* kRawSlots<kN>* kRawSlotBytes + 2 * kQStagingBytes<kN> + kRawEntryBytes;
  static_assert(kConverters * kRawSlots<64> * 4 <= kTablesOffset, "the entries fit");
  template <int kN>
  static constexpr int kRawBarriers = kConverters* kRawSlots<kN> * 2;  // full, empty
  // Every lane of the converting warp writes the stage (or Q tile) and reads the raw slot, so
  // every lane arrives on the stage's full barrier, q_full and the slot's empty barrier: each
  // lane's arrive releases its own writes and reads, which one lane's arrive after a __syncwarp
  // does not order for compute-sanitizer's racecheck (106 hazards reported that way).
  static constexpr int kFillArrivals = 32;
  static constexpr int kConverterArrivals = 32;

  // Packed keys: the tile's 64 packed rows and their scale words into a raw slot.
  __device__ __forceinline__ static void copy_packed(uint8_t* raw, float* raw_scales,
                                                     const CUtensorMap* key_map,
                                                     const CUtensorMap* scale_map, uint64_t* full,
                                                     int32_t first_key) {
    ptx::tma_load_2d(raw, key_map, full, 0, first_key);
    ptx::tma_load_1d(raw_scales, scale_map, full, first_key);
  }
  template <bool kReadOnce>
  __device__ __forceinline__ static void copy_page(uint8_t* raw, float* raw_scales,
                                                   const CUtensorMap* key_map,
                                                   const CUtensorMap* scale_map, uint64_t* full,
                                                   int c, int rows_per_copy, int32_t row_in_page,
                                                   int32_t page, uint64_t read_once) {
    uint8_t* dst = raw + c * rows_per_copy * mxfp4::kPackedRowBytes;
    if constexpr (kReadOnce) {
      ptx::tma_load_3d_hinted(dst, key_map, full, 0, row_in_page, page, read_once);
      ptx::tma_load_2d_hinted(raw_scales + c * rows_per_copy, scale_map, full, row_in_page, page,
                              read_once);
    } else {
      ptx::tma_load_3d(dst, key_map, full, 0, row_in_page, page);
      ptx::tma_load_2d(raw_scales + c * rows_per_copy, scale_map, full, row_in_page, page);
    }
  }

  // One warp: the raw slot's 64 keys as a KeysE4M3 stage (e4m3 rows, swizzled, and each key's
  // remaining scale, NaN when out of span). Lane l converts keys l and l + 32 whole: its vector's
  // reference exponent, shifts and flag need no shuffle, and its four blocks are independent
  // work (no shuffle, ballot or divergence: 96 -> about 70 instructions a block in the quad form
  // that took a lane per block). Pass j takes block sigma(q) ^ j of a key whose row is r,
  // q = (r / 2) % 4, sigma = {0, 2, 3, 1}: then the eight lanes of a shared-memory phase read
  // eight distinct 16-byte bank groups (raw rows are 64 bytes apart) and write eight distinct
  // ones (chunk 2 b ^ (r % 8) of the swizzle), since both b and b ^ q run over 0..3 as q does.
  __device__ __forceinline__ static void convert_tile(uint8_t* tile, float* tile_scales,
                                                      const uint8_t* raw, const uint2* tables,
                                                      const Mxfp4Params& fp, int lane) {
    const auto* words = reinterpret_cast<const uint32_t*>(raw + kRawValueBytes);
    convert_tile_words(tile, tile_scales, raw, tables, fp, lane,
                       [&](int key) { return words[key]; });
  }
  // convert_tile with key `key`'s scale word given by word_of(key) (the sparse form's slots,
  // format_mxfp4_sparse.cuh).
  template <typename WordOf>
  __device__ __forceinline__ static void convert_tile_words(uint8_t* tile, float* tile_scales,
                                                            const uint8_t* raw, const uint2* tables,
                                                            const Mxfp4Params& fp, int lane,
                                                            WordOf&& word_of) {
    constexpr uint32_t kSigma = 0x1320u;  // sigma(q) at bits 4q (nibbles 0, 2, 3, 1)
#pragma unroll 1
    for (int key = lane; key < kTileKeys; key += 32) {
      const uint32_t first = (kSigma >> (4 * ((key >> 1) & 3))) & 3u;
      const uint32_t word = word_of(key);
      const uint8_t* row = raw + key * mxfp4::kPackedRowBytes;
      uint4 blocks[mxfp4::kBlocks];
      int scales[mxfp4::kBlocks];
      bool nonzero[mxfp4::kBlocks];
      int top = -1;
#pragma unroll
      for (int j = 0; j < mxfp4::kBlocks; ++j) {
        const uint32_t b = first ^ static_cast<uint32_t>(j);
        blocks[j] = *reinterpret_cast<const uint4*>(row + b * 16);
        scales[j] = static_cast<int>((word >> (8 * b)) & 0xFFu);
        nonzero[j] = mxfp4::nonzero_block(blocks[j]);
        top = max(top, nonzero[j] ? scales[j] : -1);
      }
      const int ref = max(top, 0);
      bool flagged = false;
#pragma unroll
      for (int j = 0; j < mxfp4::kBlocks; ++j) {
        const int shift = scales[j] - ref + mxfp4::kMaxShift;
        flagged = flagged || (nonzero[j] && shift < mxfp4::kMinShift);
        mxfp4::store_block(tile, key, static_cast<int>(first ^ static_cast<uint32_t>(j)), blocks[j],
                           mxfp4::table_for(tables, shift));
      }
      tile_scales[key] = mxfp4::remaining_scale(ref, flagged, mxfp4::kKeyScaleBias);
      if (flagged) mxfp4::note_out_of_span(fp);
    }
  }

  // Thread 0, before the kernel's first __syncthreads: the tables after the entries.
  __device__ __forceinline__ static void init_shared(uint8_t* raw_entries) {
    mxfp4::write_tables(reinterpret_cast<uint2*>(raw_entries + kTablesOffset));
  }

  // The Q tile row of vector (tile row q, head h): the FP8 Q map's order (launch.cu). With
  // lane-owned rows each four-row copy is (byte, head % 2, row, head / 2).
  template <int kHeads, int kN>
  __device__ __forceinline__ static int q_tile_row(int q, int h) {
    if constexpr (kLaneOwnedRows<kHeads, kN>) {
      return (q / 4) * 4 * kHeads + 8 * (h / 2) + 2 * (q % 4) + h % 2;
    } else {
      return q * kHeads + h;
    }
  }

  // A converting warp (ring 0's), once the staged Q rows have landed: the tile's `vectors` (row,
  // head) vectors into the Q tile, each one's power of two (or the flag) into its weight. The
  // scales are read from global memory (rows past the call's are zero: their values are TMA's zero
  // fill). kPermutedK: in the k order of register keys (store_block_permuted).
  template <int kHeads, int kN, bool kPermutedK = false>
  __device__ __forceinline__ static void convert_query(uint8_t* q_tile, float* weights,
                                                       const uint8_t* staging, const uint2* tables,
                                                       const Mxfp4Params& fp, int64_t row0,
                                                       int64_t rows, int vectors, int lane) {
    const int b = lane % 4;
#pragma unroll 1
    for (int first = 0; first < vectors * mxfp4::kBlocks; first += 32) {
      const int v = (first + lane) / 4;  // quad-uniform; vectors is a multiple of 8 (H >= 32)
      const int q = v / kHeads;
      const int h = v % kHeads;
      const bool present = row0 + q < rows;
      const uint32_t scale =
          present ? __ldg(fp.q_scales + (row0 + q) * fp.q_scale_row_stride + h * 4 + b) : 0u;
      const uint4 block =
          *reinterpret_cast<const uint4*>(staging + v * mxfp4::kPackedRowBytes + b * 16);
      const mxfp4::BlockShift shift(block, scale << (8 * b), b);
      const uint2 table = mxfp4::table_for(tables, shift.shift);
      if constexpr (kPermutedK) {
        mxfp4::store_block_permuted(q_tile, q_tile_row<kHeads, kN>(q, h), b, block, table);
      } else {
        mxfp4::store_block(q_tile, q_tile_row<kHeads, kN>(q, h), b, block, table);
      }
      if (b == 0) {
        weights[v] *= shift.remaining_scale(mxfp4::kQueryScaleBias);
        if (shift.flagged) mxfp4::note_out_of_span(fp);
      }
    }
  }
};

}  // namespace flashindexer::cuda::scoring
