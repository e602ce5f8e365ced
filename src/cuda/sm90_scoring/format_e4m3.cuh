// SPDX-License-Identifier: Apache-2.0
// The keys' operand format, as a policy of the scoring kernel: FP8 e4m3 keys with one fp32 scale
// per key. It owns what the format decides: the bytes of a key tile and its scales in a pipeline
// stage, the producer's copies of one tile, the consumer's wgmma over it, and the scale of a key
// row. A format that the tensor cores do not read as is (MXFP4, format_mxfp4.cuh) converts
// (kConverts): TMA brings its packed bytes into a raw ring, producer warps write KeysE4M3 stages
// from them, and the consumers run this format's code unchanged.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma_e4m3.cuh"
#include "cuda/sm90_scoring/config.h"

namespace flashindexer::cuda::scoring {

struct KeysE4M3 {
  static constexpr int kTileBytes = kTileKeys * kHeadDim;  // 8 KiB of e4m3 keys
  static constexpr int kTileScaleBytes = kTileKeys * 4;    // 256 B of fp32 key scales
  // Keys of one tile that a row of the wgmma's A operand holds per k-step (k32 for e4m3).
  static constexpr int kStepK = 32;
  // Keys are copied a tile (or page) at a time; a sparse format (format_sparse.cuh) copies
  // blocks of kSparseBlock keys.
  static constexpr int kSparseBlock = 0;
  // What the copies of one dense tile bring (the stage's full barrier expects it).
  static constexpr uint32_t kLoadBytes = kTileBytes + kTileScaleBytes;
  // TMA writes the stages the consumers read: no conversion, no raw ring, no parameters beyond
  // ScoreParams (format_mxfp4.cuh converts). kConverts: the producer's warps convert the Q tiles
  // (and kConvertsKeys: the key tiles too); kRegisterKeys: the consumers convert each key tile
  // into the wgmma's A registers (format_mxfp4_registers.cuh).
  static constexpr bool kConverts = false;
  static constexpr bool kConvertsKeys = false;
  static constexpr bool kRegisterKeys = false;
  // kThreadGather: the producer warp's lanes copy each tile themselves (format_sparse.cuh).
  static constexpr bool kThreadGather = false;
  using Params = void;
  static constexpr int kRawSlotBytes = 0;
  template <int kN>
  static constexpr int kRawSlots = 0;
  template <int kN>
  static constexpr int kRawRegionBytes = 0;
  template <int kN>
  static constexpr int kRawBarriers = 0;
  __device__ __forceinline__ static void init_shared(uint8_t*) {}
  // Arrivals that complete a stage's full barrier (kFillArrivals) and q_full and a raw slot's
  // empty barrier (kConverterArrivals): the producer's lane 0, whose arrive comes with the copies'
  // bytes. A converting format counts every lane of the converting warp that writes.
  static constexpr int kFillArrivals = 1;
  static constexpr int kConverterArrivals = 1;

  // Packed keys: the tile's 64 keys and their scales, from key `first_key`.
  __device__ __forceinline__ static void copy_packed(uint8_t* keys, float* scales,
                                                     const CUtensorMap* key_map,
                                                     const CUtensorMap* scale_map, uint64_t* full,
                                                     int32_t first_key) {
    ptx::tma_load_2d(keys, key_map, full, 0, first_key);
    ptx::tma_load_1d(scales, scale_map, full, first_key);
  }
  // Copy `c` of a paged tile: the rows from `row_in_page` of cache page `page`, placed after the
  // c rows_per_copy rows before them. kReadOnce: with the L2 policy `read_once`.
  template <bool kReadOnce>
  __device__ __forceinline__ static void copy_page(uint8_t* keys, float* scales,
                                                   const CUtensorMap* key_map,
                                                   const CUtensorMap* scale_map, uint64_t* full,
                                                   int c, int rows_per_copy, int32_t row_in_page,
                                                   int32_t page, uint64_t read_once) {
    uint8_t* dst = keys + c * rows_per_copy * kHeadDim;
    if constexpr (kReadOnce) {
      ptx::tma_load_3d_hinted(dst, key_map, full, 0, row_in_page, page, read_once);
      ptx::tma_load_2d_hinted(scales + c * rows_per_copy, scale_map, full, row_in_page, page,
                              read_once);
    } else {
      ptx::tma_load_3d(dst, key_map, full, 0, row_in_page, page);
      ptx::tma_load_2d(scales + c * rows_per_copy, scale_map, full, row_in_page, page);
    }
  }
  // k-step `k` of the wgmma m64 x kPartN: keys (A) against kPartN (row, head) columns of Q (B).
  template <int kPartN>
  __device__ __forceinline__ static void mma(float (&acc)[kPartN / 2], uint64_t key_desc,
                                             uint64_t q_desc, int k) {
    ptx::WgmmaE4M3<kPartN>::mma(acc, ptx::smem_descriptor_advance(key_desc, kStepK * k),
                                ptx::smem_descriptor_advance(q_desc, kStepK * k), k > 0);
  }
  // The scale of key row `key_row` of a stage's scales.
  __device__ __forceinline__ static float scale(const uint8_t* tile_scales, int key_row) {
    return reinterpret_cast<const float*>(tile_scales)[key_row];
  }
};

}  // namespace flashindexer::cuda::scoring
