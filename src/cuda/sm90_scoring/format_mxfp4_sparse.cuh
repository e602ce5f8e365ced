// SPDX-License-Identifier: Apache-2.0
// Sparse MXFP4 keys (spec §8.5): the MXFP4 formats with their key tiles gathered block by block
// as the FP8 sparse format gathers them (SparseBlocks, format_sparse.cuh), 64 packed bytes and one
// scale word a key. A sparse call must give each key the bits the dense MXFP4 call gives it, so
// that the sparse consumer selects from the dense consumer's numbers; the two MXFP4 formats order
// the k of their wgmma differently (format_mxfp4_registers.cuh) and tensor-core sums may depend on
// that order, so each sparse call computes in the arithmetic of the dense call it stands for: the
// converting format's (KeysMXFP4: the packed workspace, as prefill's dense kernels, and the cache
// at H = 64, next_n 4, a 256-column dense tile) or the register format's (every other decode
// shape). Either way the consumers convert the keys into the wgmma's A registers: the producer's
// three converting warps, each 64-key tile serving one query row, held the H = 32 packed form at
// 8.7 ms for 4096 rows x 16384 candidate keys, where FP8 took 3.0. The out-of-span vectors are
// NaN, and the fix-up (mxfp4_fixup.cu) recomputes them through the same entries.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/format_mxfp4.cuh"
#include "cuda/sm90_scoring/format_mxfp4_registers.cuh"
#include "cuda/sm90_scoring/format_sparse.cuh"

namespace flashindexer::cuda::scoring {

// A consumer thread's two key rows in the converting format's arithmetic (KeysMXFP4): the natural
// k order, k-step j being block j (the thread's fragment: bytes 2 c, 2 c + 1, 8 + 2 c and 9 + 2 c
// of the block, c = lane % 4), and the reference exponent over the non-zero blocks, which takes
// the quad's OR of each block's non-zero parts (two shuffles a row).
template <typename WordOf>
__device__ __forceinline__ void load_operand_converter_order(KeysMXFP4Registers::Operand& op,
                                                             const uint8_t* tile,
                                                             const uint2* tables,
                                                             const Mxfp4Params& fp, int key_row,
                                                             int lane, WordOf&& word_of) {
  const int c = lane % 4;
  const uint32_t halves = (c & 1) != 0 ? 0x7632u : 0x5410u;  // the high or the low halfwords
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = key_row + 8 * r;
    const uint32_t word = word_of(row);
    uint32_t packed[mxfp4::kBlocks];
    uint32_t nonzero = 0;  // bit j: this thread's part of block j holds a non-zero value
#pragma unroll
    for (int j = 0; j < mxfp4::kBlocks; ++j) {
      const uint4 block =
          *reinterpret_cast<const uint4*>(tile + row * mxfp4::kPackedRowBytes + 16 * j);
      packed[j] = __byte_perm(c < 2 ? block.x : block.y, c < 2 ? block.z : block.w, halves);
      nonzero |= (packed[j] & 0x77777777u) != 0 ? 1u << j : 0u;
    }
    nonzero |= __shfl_xor_sync(0xffffffffu, nonzero, 1);
    nonzero |= __shfl_xor_sync(0xffffffffu, nonzero, 2);
    int top = -1;
#pragma unroll
    for (int j = 0; j < mxfp4::kBlocks; ++j) {
      const int scale = static_cast<int>((word >> (8 * j)) & 0xFFu);
      top = max(top, (nonzero >> j) & 1u ? scale : -1);
    }
    const int ref = max(top, 0);
    bool flagged = false;
#pragma unroll
    for (int j = 0; j < mxfp4::kBlocks; ++j) {
      const int shift = static_cast<int>((word >> (8 * j)) & 0xFFu) - ref + mxfp4::kMaxShift;
      flagged = flagged || (((nonzero >> j) & 1u) != 0 && shift < mxfp4::kMinShift);
      const uint2 e = mxfp4::expand_word(packed[j], mxfp4::table_for(tables, shift));
      op.a[j][r] = e.x;      // row key_row + 8 r, columns 4 c + {0..3} of k-step j
      op.a[j][2 + r] = e.y;  // columns 16 + 4 c + {0..3}
    }
    op.scale[r] = mxfp4::remaining_scale(ref, flagged, mxfp4::kKeyScaleBias);
    if (flagged && c == 0) mxfp4::note_out_of_span(fp);
  }
}

// The sparse register form: a stage holds the gathered values and the blocks' scale slots, and
// each consumer thread converts its two rows, their words read through their blocks' slots.
// kConverterBits: in the converting format's arithmetic (the dense prefill and the 256-column
// decode tiles), Q included; else KeysMXFP4Registers' (the other decode tiles).
template <int kBlock, bool kPagedSource, bool kConverterBits>
struct SparseKeysMXFP4Registers
    : SparseGathered<KeysMXFP4Registers, kBlock, kPagedSource, mxfp4::kPackedRowBytes> {
  using Blocks = SparseBlocks<kBlock, kPagedSource, mxfp4::kPackedRowBytes>;
  using Operand = KeysMXFP4Registers::Operand;
  __device__ __forceinline__ static void load_operand(Operand& op, const uint8_t* tile,
                                                      const uint8_t* tile_scales,
                                                      const uint2* tables, const Mxfp4Params& fp,
                                                      int key_row, int lane) {
    auto word_of = [&](int row) { return Blocks::word(tile_scales, row); };
    if constexpr (kConverterBits) {
      load_operand_converter_order(op, tile, tables, fp, key_row, lane, word_of);
    } else {
      KeysMXFP4Registers::load_operand_words(op, tile, tables, fp, key_row, lane, word_of);
    }
  }
  template <int kHeads, int kN>
  __device__ __forceinline__ static void convert_query(uint8_t* q_tile, float* weights,
                                                       const uint8_t* staging, const uint2* tables,
                                                       const Mxfp4Params& fp, int64_t row0,
                                                       int64_t rows, int vectors, int lane) {
    KeysMXFP4::convert_query<kHeads, kN, !kConverterBits>(q_tile, weights, staging, tables, fp,
                                                          row0, rows, vectors, lane);
  }
};

}  // namespace flashindexer::cuda::scoring
