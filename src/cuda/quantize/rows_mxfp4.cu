// SPDX-License-Identifier: Apache-2.0
// MXFP4 row quantization (spec §3.3, §2.4) on the GPU: one group of D/16 lanes per pair of rows,
// a block of 32 values on four lanes (lanes.cuh).
//
// Each lane loads its sixteen values of both rows (16-byte loads, issued together), a block's
// amax is two shuffles between its four lanes, which then derive one (row, block) scale byte each
// and exchange them (mxfp4_block_bytes), and each lane stores its eight packed bytes; the block's
// first lane writes the block's scale byte. The launch is rows_fp8.cu's (rows_launch.cuh).
#include "cuda/quantize/rows.h"
#include "cuda/quantize/rows_launch.cuh"

namespace flashindexer::cuda::quant {
namespace {

template <typename In, int kLanes, bool kVector, RopeStyle kStyle>
__global__ void __launch_bounds__(kBlockThreads,
                                  min_blocks_per_sm<In, kLanes, kVector>(kStyle != RopeStyle::kNone,
                                                                         true))
    mxfp4_rows_kernel(const RowJob job) {
  constexpr bool kRope = kStyle != RopeStyle::kNone;
  // 32-bit indices and compares: a launch has fewer than 2^30 rows (rows_launch.cuh).
  constexpr int kRows = kRowsPerGroup;
  const auto row_count = static_cast<uint32_t>(job.rows);
  const uint32_t group = blockIdx.x * (kBlockThreads / kLanes) + threadIdx.x / kLanes;
  const uint32_t first_row = group * kRows;
  const int lane = static_cast<int>(threadIdx.x % kLanes);
  // A warp leaves only when all its groups are past the end (its shuffles name the whole warp).
  const uint32_t warp_first_row = (group & ~static_cast<uint32_t>(32 / kLanes - 1)) * kRows;
  if (warp_first_row >= row_count) return;
  const unsigned mask = kFullWarp;
  const int value_bytes = job.head_dim / 2;
  const int scale_count = job.head_dim / kMxfp4BlockSize;
  RowIndex at[kRows];
  // A row's destination: its addresses, or with RoPE a key until the stores (rows.h).
  std::conditional_t<kRope, RowKey, RowTarget> target[kRows];
  // Aligned bf16 rows stay in their loaded words (chunk_amax_bf16, chunk_codes_of_pairs: the
  // same bits with fewer ALU instructions), RoPE widening only the chunks it rotates and
  // rounding them back into words; every other job widens its values to floats.
  constexpr bool kWords = std::is_same_v<In, Bf16Bits> && kVector;
  uint32_t words[kRows][kLaneValues / 2];
  float x[kRows][kLaneValues];
  begin_rows(job, first_row, row_count, value_bytes, scale_count, 1, at, target, [&](int u) {
    if constexpr (kWords) {
      load_row_values<In, kLanes, kVector>(words[u], job, at[u], lane);
    } else {
      load_row_values<In, kLanes, kVector>(x[u], job, at[u], lane);
    }
  });
  if constexpr (kRope && kWords) {
    apply_rope_rows<kLanes, kStyle>(words, job, at, target, lane, mask);
  } else if constexpr (kRope) {
    apply_rope_rows<kLanes, kStyle>(x, job, at, target, lane, mask);
  }
  uint32_t scale_byte[kRows][2];
  if constexpr (kWords && kLanes >= 4) {
    uint32_t amaxes[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) amaxes[u] = slot_amaxes_bf16(words[u]);
    mxfp4_block_bytes_of_words<kLanes>(scale_byte, amaxes, lane, mask);
  } else if constexpr (kWords) {
    float amax[kRows][2];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
#pragma unroll
      for (int s = 0; s < 2; ++s) amax[u][s] = chunk_amax_bf16(words[u] + 4 * s);
    }
    mxfp4_block_bytes_of<kLanes>(scale_byte, amax, lane, mask);
  } else {
    mxfp4_block_bytes<kLanes>(scale_byte, x, lane, mask);
  }
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    if (!target[u].live) continue;
    const RowAddresses to = row_addresses(job, target[u], value_bytes, scale_count, 1);
    uint2 codes;
    if constexpr (kWords) {
      codes = make_uint2(chunk_codes_of_pairs(words[u], scale_byte[u][0]),
                         chunk_codes_of_pairs(words[u] + 4, scale_byte[u][1]));
    } else {
      codes = mxfp4_codes<std::is_same_v<In, Bf16Bits>>(x[u], scale_byte[u]);
    }
    store_mxfp4_lane<kVector, kLanes>(to.values, codes, lane);
    store_mxfp4_scales<kLanes>(to.scales, scale_byte[u], lane);
    // MXFP4 weights are not q-scaled.
    if (lane == 0) fold_weight(job.weights, view_row(at[u], target[u]), nullptr);
  }
}

// The kernel for launch_rows (rows_launch.cuh).
struct Mxfp4Rows {
  static constexpr int64_t kScaleElement = 1;  // bytes of an element of a scales view
  template <typename In, int kLanes, bool kVector, RopeStyle kStyle>
  static void launch(const RowJob& job, cudaStream_t stream) {
    const unsigned blocks = rows_launch::blocks_for(job, kLanes, kRowsPerGroup);
    mxfp4_rows_kernel<In, kLanes, kVector, kStyle><<<blocks, kBlockThreads, 0, stream>>>(job);
  }
};

}  // namespace

Status launch_mxfp4_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  return launch_rows<Mxfp4Rows>(job, stream, op);
}

}  // namespace flashindexer::cuda::quant
