// SPDX-License-Identifier: Apache-2.0
// MXFP4 keys converted by the consumers, into the wgmma's A registers (the decode tiles of up to
// 192 columns; format_mxfp4.cuh has the scale scheme and the conversion itself).
//
// Why. With the producer's three warps converting every key tile into an e4m3 stage, decode ran
// at 0.60-0.73 of our FP8 decode's speed where half the bytes should make it up to 1.9x faster:
// three warps of an SM cannot convert 64 keys in the time eight consumer warps take to score
// them. Here TMA brings a tile's packed bytes and scale words straight into a (4 KiB + 256 B)
// stage, and each of the consuming warpgroup's 128 threads converts what its own A fragment
// holds: no e4m3 stage written to shared memory and read back, eight warps instead of three, and
// a stage is free as soon as its bytes are in registers. The accumulator rows of a thread are its
// A rows, so it also has its keys' remaining scales at hand.
//
// The k order. A thread's A fragment of k-step j holds columns 4 c + {0..3} and 16 + 4 c + {0..3}
// (c = lane % 4) of its two rows. Those columns are given block c's word j (elements 8 j .. 8 j + 7
// of the block), so each thread reads one 16-byte block of each row and converts it with one
// shift; the Q tile is written in the same k order (store_block_permuted). Both operands see the
// same permutation of the 128 k, so each dot product is the same sum of the same products.
//
// The four producer warps load the key tiles as FP8's do (the one loading warp of the converting
// format held decode at 0.38 ms for 64 x 131072 keys, at H = 32 and 64 alike), and warp 0
// converts each work item's Q tile itself. The rest is KeysMXFP4's: the out-of-span vectors get
// NaN as their scale and the fix-up kernel recomputes their logits.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma_e4m3.cuh"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_mxfp4.cuh"
#include "cuda/sm90_scoring/params.h"

namespace flashindexer::cuda::scoring {

struct KeysMXFP4Registers : KeysMXFP4 {
  // A stage is what TMA brings: the tile's packed values, then one scale word per key.
  static constexpr int kTileBytes = kTileKeys * mxfp4::kPackedRowBytes;  // 4 KiB
  static constexpr int kTileScaleBytes = kTileKeys * 4;
  static constexpr uint32_t kLoadBytes = kTileBytes + kTileScaleBytes;
  static constexpr bool kConvertsKeys = false;
  static constexpr bool kRegisterKeys = true;
  // The stage's full barrier is the loader's (one arrive with the bytes); q_full is producer
  // warp 0's, every lane of it, once it has converted the Q tile (KeysMXFP4::kConverterArrivals).
  static constexpr int kFillArrivals = 1;
  // No raw rings: the key tiles go straight into the stages, and the Q tiles into the staging
  // buffers, where producer warp 0 converts them once its copies have landed on raw barrier 0
  // (producer.cuh, publish_converted_item; the second barrier is unused).
  static constexpr int kRawSlotBytes = 0;
  template <int kN>
  static constexpr int kRawSlots = 1;
  template <int kN>
  static constexpr int kRawRegionBytes = 2 * kQStagingBytes<kN> + kRawEntryBytes;
  template <int kN>
  static constexpr int kRawBarriers = 2;

  // One tile's A operand for the thread: a[j] is k-step j's fragment, scale[r] the remaining
  // power of two of key row key_row + 8 r (NaN when its vector is out of span).
  struct Operand {
    uint32_t a[kHeadDim / kStepK][4];
    float scale[2];
  };

  // The thread's part of a stage: its two key rows' block lane % 4, converted, and their
  // scales. A key's reference exponent here is the largest of its four block scales, read off
  // its scale word by every lane of the quad, where KeysMXFP4 takes the largest over the
  // non-zero blocks: that needed two shuffles a row, whose latency was the largest stall of
  // the conversion on the H200. The two differ only for a key whose largest scale is an all-zero
  // block's (the quantizers give an all-zero block the smallest scale); such a key is still exact,
  // through the fix-up if its non-zero blocks then fall out of the span. Whether any non-zero
  // block of the key is out of span takes one ballot over the quad.
  __device__ __forceinline__ static void load_operand(Operand& op, const uint8_t* tile,
                                                      const uint8_t* tile_scales,
                                                      const uint2* tables, const Mxfp4Params& fp,
                                                      int key_row, int lane) {
    const auto* words = reinterpret_cast<const uint32_t*>(tile_scales);
    load_operand_words(op, tile, tables, fp, key_row, lane, [&](int row) { return words[row]; });
  }
  // load_operand with key row `row`'s scale word given by word_of(row) (the sparse form's slots,
  // format_mxfp4_sparse.cuh).
  template <typename WordOf>
  __device__ __forceinline__ static void load_operand_words(Operand& op, const uint8_t* tile,
                                                            const uint2* tables,
                                                            const Mxfp4Params& fp, int key_row,
                                                            int lane, WordOf&& word_of) {
    const int b = lane % 4;
    // Both rows' loads first, so that their latencies overlap.
    uint4 blocks[2];
    uint32_t scale_words[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = key_row + 8 * r;
      blocks[r] = *reinterpret_cast<const uint4*>(tile + row * mxfp4::kPackedRowBytes + 16 * b);
      scale_words[r] = word_of(row);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint32_t word = scale_words[r];
      const int ref = static_cast<int>(
          max(max(word & 0xFFu, (word >> 8) & 0xFFu), max((word >> 16) & 0xFFu, word >> 24)));
      const int shift = static_cast<int>((word >> (8 * b)) & 0xFFu) - ref + mxfp4::kMaxShift;
      const bool flagged = mxfp4::quad_out_of_span(mxfp4::nonzero_block(blocks[r]), shift);
      const uint2 table = mxfp4::table_for(tables, shift);
      const uint32_t packed[4] = {blocks[r].x, blocks[r].y, blocks[r].z, blocks[r].w};
#pragma unroll
      for (int j = 0; j < kHeadDim / kStepK; ++j) {
        const uint2 e = mxfp4::expand_word(packed[j], table);
        op.a[j][r] = e.x;      // row key_row + 8 r, columns 4 c + {0..3}
        op.a[j][2 + r] = e.y;  // columns 16 + 4 c + {0..3}
      }
      op.scale[r] = mxfp4::remaining_scale(ref, flagged, mxfp4::kKeyScaleBias);
      if (flagged && b == 0) mxfp4::note_out_of_span(fp);
    }
  }

  // k-step `k` of the wgmma m64 x kPartN: the thread's A registers against kPartN Q columns.
  template <int kPartN>
  __device__ __forceinline__ static void mma(float (&acc)[kPartN / 2], Operand& op, uint64_t q_desc,
                                             int k) {
    ptx::WgmmaE4M3RegisterA<kPartN>::mma(acc, op.a[k],
                                         ptx::smem_descriptor_advance(q_desc, kStepK * k), k > 0);
  }
  // After the tile's wgmma_wait_group: keeps the compiler from reusing the A registers before it.
  // This reaches NVVM only (an empty asm is no instruction for ptxas), so nothing may write
  // registers between the wgmma and its wait: tests/tools/check_sass.py fails a kernel whose
  // SASS writes an in-flight QGMMA's A registers.
  __device__ __forceinline__ static void fence_operand(Operand& op) {
#pragma unroll
    for (int j = 0; j < kHeadDim / kStepK; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) ptx::fence_operand(op.a[j][i]);
    }
  }

  template <int kHeads, int kN>
  __device__ __forceinline__ static void convert_query(uint8_t* q_tile, float* weights,
                                                       const uint8_t* staging, const uint2* tables,
                                                       const Mxfp4Params& fp, int64_t row0,
                                                       int64_t rows, int vectors, int lane) {
    KeysMXFP4::convert_query<kHeads, kN, true>(q_tile, weights, staging, tables, fp, row0, rows,
                                               vectors, lane);
  }
};

}  // namespace flashindexer::cuda::scoring
