// SPDX-License-Identifier: Apache-2.0
// MXFP4 operands (spec §2.4, §3.3, §4.3) for the scoring kernel: E2M1 values, one UE8M0 scale per
// 32 of them, for the queries and the keys. Hopper has no FP4 tensor cores, so the kernel turns
// both into e4m3 in shared memory and runs the FP8 wgmma pipeline unchanged.
//
// The scale scheme. A 128-value vector (one key, or one (row, head) of Q) has four block scales
// 2^(s_b - 127). Every E2M1 value m 2^e (m in {1, 1.5}, e in -1..2) times 2^d is exactly an e4m3
// value for d in [-8, 6] (d = -8 reaches the smallest subnormal, 2^-9; d = 6 puts 6 at 384 <= 448).
// So the vector's reference exponent is ref = the largest s_b among its blocks holding a non-zero
// value, block b is written to e4m3 shifted by d_b = s_b - ref + 6, and one power of two per
// vector is left: 2^(ref - 133), folded into the weights for a query column and into the key
// scale for a key, as the FP8 path has them. That is exact whenever every non-zero block lies
// within 14 binades of its vector's largest: always, for vectors quantized from one fp32/bf16
// vector of any realistic spread. A vector beyond that span is flagged when it is converted, and
// every (column, key) product it takes part in is recomputed on the CUDA cores from the raw bytes
// in global memory, block by block (exact_dot): never a silent flush. The recomputation depends on
// the (row, key) data alone, so every schedule, and the fused indexer, gets the same bits.
//
// Shared memory: a key stage holds 8 KiB of e4m3; TMA brings the 4 KiB of packed values into its
// upper half and the consumer warpgroup converts the tile in place; the 64 scale words are
// overwritten with each key's scale (sign bit: flagged). The query tile comes packed into a
// staging buffer, its scale words beside it, and both consumer warpgroups convert it when the
// item starts; each column's scale (sign bit: flagged) goes after the scale words.
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_e4m3.cuh"
#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {
namespace mxfp4 {

constexpr int kBlockBytes = 16;    // 32 E2M1 values share one scale
constexpr int kPackedRowBytes = kHeadDim / 2;
constexpr int kMaxShift = 6;       // 6 * 2^6 = 384, the largest e4m3 power-of-two multiple of 6
constexpr int kMinShift = -8;      // 0.5 * 2^-8 = 2^-9, the smallest e4m3 subnormal
constexpr int kScaleBias = 127 + kMaxShift;

// The e4m3 bytes of the E2M1 magnitudes {0, 0.5, 1, 1.5, 2, 3, 4, 6} times 2^d: codes 0-3 in x,
// 4-7 in y (little-endian bytes), for __byte_perm. For d >= -5 all are normal numbers and the
// shift only adds d to their exponent field; below that some are subnormal and are converted one
// by one. (Below -8 the bytes are inexact; the block's vector is flagged and never used as is.)
__device__ __forceinline__ uint2 magnitude_table(int d) {
  if (d >= -5) {
    const uint32_t add = static_cast<uint32_t>(8 * d);
    return {0x3C383000u + add * 0x01010100u, 0x4C484440u + add * 0x01010101u};
  }
  uint32_t bytes[2] = {0, 0};
#pragma unroll
  for (int code = 1; code < 8; ++code) {
    const float magnitude = code < 2 ? 0.5f : (1.0f + 0.5f * (code & 1)) * float(1 << ((code >> 1) - 1));
    const uint32_t byte =
        __nv_cvt_float_to_fp8(ldexpf(magnitude, d), __NV_SATFINITE, __NV_E4M3) & 0xFFu;
    bytes[code / 4] |= byte << (8 * (code % 4));
  }
  return {bytes[0], bytes[1]};
}

// Eight E2M1 codes (one packed word, element 2i in the low nibble of byte i) as eight e4m3 bytes
// through the table: the magnitude by byte permutation, the sign bit moved from bit 3 of the
// nibble to bit 7 of the byte.
__device__ __forceinline__ uint2 expand_word(uint32_t packed, uint2 table) {
  const uint32_t low = packed & 0xFFFFu;
  const uint32_t high = packed >> 16;
  const uint32_t x = __byte_perm(table.x, table.y, low & 0x7777u) |
                     __byte_perm(0x8000u, 0u, (low >> 3) & 0x1111u);
  const uint32_t y = __byte_perm(table.x, table.y, high & 0x7777u) |
                     __byte_perm(0x8000u, 0u, (high >> 3) & 0x1111u);
  return {x, y};
}

__device__ __forceinline__ bool block_nonzero(const uint4& block) {
  return ((block.x | block.y | block.z | block.w) & 0x77777777u) != 0;
}

// One block's part of its vector's conversion, for the four lanes (consecutive, lane % 4 = block)
// that hold the vector's four blocks: the vector's reference exponent over its non-zero blocks
// (0 when all are zero), this block's shift, and whether any non-zero block is out of span.
struct BlockShift {
  int ref;
  int shift;
  bool flagged;

  __device__ __forceinline__ BlockShift(const uint4& block, uint32_t scale_word, int b) {
    const int scale = static_cast<int>((scale_word >> (8 * b)) & 0xFFu);
    const bool nonzero = block_nonzero(block);
    int top = nonzero ? scale : -1;
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 1));
    top = max(top, __shfl_xor_sync(0xffffffffu, top, 2));
    ref = max(top, 0);
    shift = scale - ref + kMaxShift;
    bool out = nonzero && shift < kMinShift;
    out = out || __shfl_xor_sync(0xffffffffu, out, 1);
    flagged = out || __shfl_xor_sync(0xffffffffu, out, 2);
  }
  // The vector's remaining scale, 2^(ref - 133), with the flag in its sign bit.
  __device__ __forceinline__ uint32_t scale_bits() const {
    return __float_as_uint(ldexpf(1.0f, ref - kScaleBias)) | (flagged ? 0x80000000u : 0u);
  }
};

// Writes one block (32 values) as e4m3 into row `row` of a 128-byte-swizzled tile (the layout the
// TMA writes with CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk c of row r at chunk c ^ (r % 8)).
__device__ __forceinline__ void store_block(uint8_t* tile, int row, int b, const uint4& block,
                                            int shift) {
  const uint2 table = magnitude_table(shift);
  const uint2 e0 = expand_word(block.x, table);
  const uint2 e1 = expand_word(block.y, table);
  const uint2 e2 = expand_word(block.z, table);
  const uint2 e3 = expand_word(block.w, table);
  uint8_t* base = tile + row * kHeadDim;
  *reinterpret_cast<uint4*>(base + (((2 * b) ^ (row & 7)) * 16)) = make_uint4(e0.x, e0.y, e1.x, e1.y);
  *reinterpret_cast<uint4*>(base + (((2 * b + 1) ^ (row & 7)) * 16)) =
      make_uint4(e2.x, e2.y, e3.x, e3.y);
}

// E2M1 code (4 bits) as a float.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const float magnitude =
      m >= 2 ? __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22)) : 0.5f * m;
  return (code & 8u) ? -magnitude : magnitude;
}

// The reference exponent of a raw vector (64 packed bytes in global memory, its scale word), by
// BlockShift's rule. The fallback runs beside the consumers' live accumulators: one word at a
// time, in loops that stay loops.
__device__ __forceinline__ int vector_ref(const uint8_t* values, uint32_t scale_word) {
  const auto* words = reinterpret_cast<const uint32_t*>(values);
  int top = -1;
#pragma unroll 1
  for (int b = 0; b < 4; ++b) {
    uint32_t bits = 0;
#pragma unroll
    for (int w = 0; w < 4; ++w) bits |= __ldg(words + 4 * b + w);
    if ((bits & 0x77777777u) != 0) top = max(top, static_cast<int>((scale_word >> (8 * b)) & 0xFFu));
  }
  return max(top, 0);
}

// Block b's sum of E2M1 products: multiples of 1/4 up to 36, so 32 of them sum exactly in fp32.
__device__ __forceinline__ float block_dot(const uint8_t* q_values, const uint8_t* k_values, int b) {
  const auto* q = reinterpret_cast<const uint32_t*>(q_values) + 4 * b;
  const auto* k = reinterpret_cast<const uint32_t*>(k_values) + 4 * b;
  float dot = 0.0f;
#pragma unroll 1
  for (int w = 0; w < 4; ++w) {
    const uint32_t qw = __ldg(q + w);
    const uint32_t kw = __ldg(k + w);
#pragma unroll
    for (int n = 0; n < 8; ++n) dot = __fmaf_rn(e2m1_value(qw >> (4 * n)), e2m1_value(kw >> (4 * n)), dot);
  }
  return dot;
}

}  // namespace mxfp4

struct KeysMXFP4 : E4M3Operands {
  using Params = Mxfp4Params;
  static constexpr int kTileBytes = kTileKeys * kHeadDim;  // 8 KiB: the converted e4m3 tile
  static constexpr int kTileScaleBytes = kTileKeys * 4;    // a scale word per key
  static constexpr int kPackedOffset = kTileBytes / 2;     // where TMA puts the packed values
  static constexpr int kLoadBytes = kTileKeys * mxfp4::kPackedRowBytes + kTileScaleBytes;
  static constexpr int kQRowBytes = mxfp4::kPackedRowBytes;
  static constexpr int kQStagingBytesPerColumn = mxfp4::kPackedRowBytes;
  // Per column: the raw scale word (copied by the producer; all of them first), then the
  // converted column scale.
  static constexpr int kQInfoBytesPerColumn = 8;
  static constexpr bool kConverts = true;

  __device__ __forceinline__ static void copy_packed(uint8_t* keys, float* scales,
                                                     const CUtensorMap* key_map,
                                                     const CUtensorMap* scale_map, uint64_t* full,
                                                     int32_t first_key) {
    ptx::tma_load_2d(keys + kPackedOffset, key_map, full, 0, first_key);
    ptx::tma_load_1d(scales, scale_map, full, first_key);
  }
  template <bool kReadOnce>
  __device__ __forceinline__ static void copy_page(uint8_t* keys, float* scales,
                                                   const CUtensorMap* key_map,
                                                   const CUtensorMap* scale_map, uint64_t* full,
                                                   int c, int rows_per_copy, int32_t row_in_page,
                                                   int32_t page, uint64_t read_once) {
    uint8_t* dst = keys + kPackedOffset + c * rows_per_copy * mxfp4::kPackedRowBytes;
    if constexpr (kReadOnce) {
      ptx::tma_load_3d_hinted(dst, key_map, full, 0, row_in_page, page, read_once);
      ptx::tma_load_2d_hinted(scales + c * rows_per_copy, scale_map, full, row_in_page, page,
                              read_once);
    } else {
      ptx::tma_load_3d(dst, key_map, full, 0, row_in_page, page);
      ptx::tma_load_2d(scales + c * rows_per_copy, scale_map, full, row_in_page, page);
    }
  }

  // The bytes of the Q tile's scale words the producer copies (one bulk copy, lane 0): the
  // launch's rows of the tile, whose words are contiguous (checked on the host). The words of
  // rows past them are left as they are: those rows' TMA values are zero-filled, so they convert
  // to zeros whatever their scales.
  template <int kHeads, int kN>
  __device__ __forceinline__ static uint32_t copy_query_scales(const Params& fp,
                                                               const ScoreParams& p, uint8_t*,
                                                               int32_t row0) {
    const int64_t rows = min(static_cast<int64_t>(kN / kHeads), p.rows - row0);
    return static_cast<uint32_t>(rows) * kHeads * 4;
  }

  // Both consumer warpgroups at the start of an item: the staged packed Q tile to e4m3 in the Q
  // tile (same rows, 128-byte swizzle), and each column's scale. Returns whether any column of
  // the tile is flagged (the same answer on all 256 threads).
  template <int kHeads, int kN>
  __device__ __forceinline__ static bool prepare_query(const uint8_t* staging, uint8_t* q_tile,
                                                       uint8_t* info) {
    constexpr int kUnits = kN * 4;  // (Q tile row, block) pairs
    const int thread = static_cast<int>(threadIdx.x) - 128;  // 0..255 over both warpgroups
    auto* words = reinterpret_cast<uint32_t*>(info);
    bool flagged = false;
    // Not unrolled: at H = 32 the 8-row prefill consumers have no registers to spare.
#pragma unroll 1
    for (int first = 0; first < kUnits; first += 256) {
      const int unit = first + thread;
      const bool active = unit < kUnits;  // uniform per quad (kUnits is a multiple of 4)
      const int row = unit / 4;
      const int b = unit % 4;
      const int column = tile_column<kHeads, kN>(row);
      const uint4 block = active ? reinterpret_cast<const uint4*>(staging)[unit] : make_uint4(0, 0, 0, 0);
      const uint32_t word = active ? words[column] : 0u;
      const mxfp4::BlockShift shift(block, word, b);
      if (active) {
        mxfp4::store_block(q_tile, row, b, block, shift.shift);
        if (b == 0) words[kN + column] = shift.scale_bits();
      }
      flagged = flagged || (active && shift.flagged);
    }
    ptx::fence_proxy_async_shared();  // the generic writes, before the wgmma reads them
    return ptx::named_barrier_or(kQueryBarrier, 256, flagged);
  }

  // The scale of column (tile row q, head h), without its flag, and whether it is flagged.
  template <int kHeads, int kN>
  __device__ __forceinline__ static float column_scale(const uint8_t* info, int q, int h) {
    return __uint_as_float(reinterpret_cast<const uint32_t*>(info)[kN + q * kHeads + h] &
                           0x7FFFFFFFu);
  }
  template <int kHeads, int kN>
  __device__ __forceinline__ static bool column_flagged(const uint8_t* info, int q, int h) {
    return (reinterpret_cast<const uint32_t*>(info)[kN + q * kHeads + h] >> 31) != 0;
  }

  // One consumer warpgroup, before the wgmma of its step: converts the step's tiles in place.
  // Returns whether any key of them is flagged (the same answer on the warpgroup's threads).
  // The e4m3 rows of keys 0-31 lie below the packed values and are written at once; those of
  // keys 32-63 overlap the packed values, so their blocks are read first and written after a
  // barrier that follows every read (one block per thread and tile held across it: the
  // accumulators are live here).
  template <int kTiles>
  __device__ __forceinline__ static bool prepare_tiles(uint8_t* keys_base, uint8_t* scales_base,
                                                       const uint32_t (&stages)[kTiles], int tiles,
                                                       int consumer) {
    const int thread = threadIdx.x % 128;  // unit `thread` (keys 0-31), then unit 128 + thread
    bool flagged = false;
    uint4 upper[kTiles];
    uint32_t upper_words[kTiles];
    auto convert = [&](uint8_t* tile, uint32_t* scale_words, int unit, const uint4& block,
                       uint32_t word) {
      const mxfp4::BlockShift shift(block, word, unit % 4);
      mxfp4::store_block(tile, unit / 4, unit % 4, block, shift.shift);
      if (unit % 4 == 0) scale_words[unit / 4] = shift.scale_bits();
      flagged = flagged || shift.flagged;
    };
#pragma unroll
    for (int u = 0; u < kTiles; ++u) {
      if (u < tiles) {
        uint8_t* tile = keys_base + stages[u] * kTileBytes;
        const auto* packed = reinterpret_cast<const uint4*>(tile + kPackedOffset);
        auto* scale_words = reinterpret_cast<uint32_t*>(scales_base + stages[u] * kTileScaleBytes);
        upper[u] = packed[128 + thread];
        upper_words[u] = scale_words[32 + thread / 4];
        convert(tile, scale_words, thread, packed[thread], scale_words[thread / 4]);
      }
    }
    ptx::named_barrier_sync(kKeyBarrier + consumer, 128);
#pragma unroll
    for (int u = 0; u < kTiles; ++u) {
      if (u < tiles) {
        convert(keys_base + stages[u] * kTileBytes,
                reinterpret_cast<uint32_t*>(scales_base + stages[u] * kTileScaleBytes),
                128 + thread, upper[u], upper_words[u]);
      }
    }
    ptx::fence_proxy_async_shared();
    return ptx::named_barrier_or(kKeyBarrier + consumer, 128, flagged);
  }

  // The scale of key row `key_row` of a converted stage, without its flag; whether it is flagged.
  __device__ __forceinline__ static float scale(const uint8_t* tile_scales, int key_row) {
    return __uint_as_float(reinterpret_cast<const uint32_t*>(tile_scales)[key_row] & 0x7FFFFFFFu);
  }
  __device__ __forceinline__ static bool key_flagged(const uint8_t* tile_scales, int key_row) {
    return (reinterpret_cast<const uint32_t*>(tile_scales)[key_row] >> 31) != 0;
  }

  // The accumulator value the tensor cores would hold for (row, head) against key position `key`
  // had the vectors converted exactly: q . k / (2^(ref_q - 133) 2^(ref_k - 133)), block by block
  // from the raw bytes (group: the decode request, for the block table).
  template <bool kPaged>
  __device__ __forceinline__ static float exact_dot(const Params& fp, const ScoreParams& p,
                                                    int64_t row, int head, int64_t group,
                                                    int32_t key) {
    const uint8_t* q_values = fp.q_values + row * fp.q_row_stride + head * fp.q_head_stride;
    const uint32_t q_word = __ldg(reinterpret_cast<const uint32_t*>(
        fp.q_scales + row * fp.q_scale_row_stride + head * fp.q_scale_head_stride));
    const uint8_t* key_values;
    const uint8_t* key_scales;
    if constexpr (kPaged) {
      const int32_t page =
          p.block_table[group * p.table_stride_b + (key >> p.page_shift) * p.table_stride_p];
      const uint8_t* base = fp.cache + page * fp.page_stride;
      const int32_t slot = key & (p.page_size - 1);
      key_values = base + slot * mxfp4::kPackedRowBytes;
      key_scales = base + p.page_size * mxfp4::kPackedRowBytes + slot * 4;
    } else {
      key_values = fp.k_values + key * fp.k_row_stride;
      key_scales = fp.k_scales + key * fp.k_scale_row_stride;
    }
    const uint32_t k_word = __ldg(reinterpret_cast<const uint32_t*>(key_scales));
    // The blocks are read twice (for the references, then for the products): a rare path, and
    // the registers are the consumers' accumulators'.
    const int q_ref = mxfp4::vector_ref(q_values, q_word);
    const int k_ref = mxfp4::vector_ref(key_values, k_word);
    float total = 0.0f;
#pragma unroll 1
    for (int b = 0; b < 4; ++b) {
      const int shift = (static_cast<int>((q_word >> (8 * b)) & 0xFFu) - q_ref) +
                        (static_cast<int>((k_word >> (8 * b)) & 0xFFu) - k_ref) +
                        2 * mxfp4::kMaxShift;
      total += ldexpf(mxfp4::block_dot(q_values, key_values, b), shift);
    }
    return total;
  }

  // Named barriers: 1 for both consumer warpgroups (the query), 2 and 3 for each one's tiles.
  static constexpr uint32_t kQueryBarrier = 1;
  static constexpr uint32_t kKeyBarrier = 2;

  // The column (q H + h) of Q tile row `row`: with lane-owned rows the tile is loaded permuted
  // (row 8 (h / 2) + 2 (q % 4) + h % 2 of each four-row copy; schedule.cuh, publish_item).
  template <int kHeads, int kN>
  __device__ __forceinline__ static int tile_column(int row) {
    if constexpr (kLaneOwnedRows<kHeads, kN>) {
      const int copy = row / (4 * kHeads);
      const int local = row % (4 * kHeads);
      const int head = 2 * (local / 8) + local % 2;
      const int q = 4 * copy + (local / 2) % 4;
      return q * kHeads + head;
    } else {
      return row;
    }
  }
};

}  // namespace flashindexer::cuda::scoring
