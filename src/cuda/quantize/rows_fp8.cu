// SPDX-License-Identifier: Apache-2.0
// FP8 row quantization (spec §3.2, §2.3) on the GPU: one group of D/16 lanes per pair of rows.
//
// Memory-bound (2 or 4 bytes in, 1 out per value): each lane issues the 16-byte loads of both its
// rows at once, the row amax is log2(D/16) shuffles, the two rows' scales are computed by two
// lanes at once and shuffled to the group, and each lane stores its sixteen codes as two 8-byte
// stores (one a chunk, lanes.cuh); lane 0 of the group writes the row's scale (and folded weight).
// 256 threads per block, no loop: a 1M-key insert at D = 128 is 16K blocks. RoPE is a template flag
// so the plain quantizers carry none of its registers.
#include "cuda/quantize/rows.h"
#include "cuda/quantize/rows_launch.cuh"

namespace flashindexer::cuda::quant {
namespace {

template <typename In, int kLanes, bool kVector, RopeStyle kStyle>
__global__ void __launch_bounds__(kBlockThreads,
                                  min_blocks_per_sm<In, kLanes, kVector>(kStyle != RopeStyle::kNone,
                                                                         false))
    fp8_rows_kernel(const RowJob job) {
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
  RowIndex at[kRows];
  // A row's destination: its addresses, or with RoPE a key until the stores (rows.h).
  std::conditional_t<kRope, RowKey, RowTarget> target[kRows];
  // Aligned bf16 rows with RoPE stay in their loaded words until their codes (RoPE widens the
  // chunks it rotates and rounds them back, the amax is the words' own): half the registers of
  // floats, which the rotation's cos / sin entries need. The other jobs hold floats.
  constexpr bool kWords = std::is_same_v<In, Bf16Bits> && kVector && kRope;
  using Values = std::conditional_t<kWords, uint32_t[kLaneValues / 2], float[kLaneValues]>;
  Values x[kRows];
  begin_rows(job, first_row, row_count, job.head_dim, 4, sizeof(float), at, target,
             [&](int u) { load_row_values<In, kLanes, kVector>(x[u], job, at[u], lane); });
  if constexpr (kRope) apply_rope_rows<kLanes, kStyle>(x, job, at, target, lane, mask);
  Fp8Scale scale[kRows];
  if constexpr (kWords) {
    float lane_max[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      lane_max[u] = fmaxf(chunk_amax_bf16(x[u]), chunk_amax_bf16(x[u] + kChunkValues / 2));
    }
    fp8_group_scales_of<kLanes>(scale, lane_max, job.floor, lane, mask);
  } else {
    fp8_group_scales<kLanes>(scale, x, job.floor, lane, mask);
  }
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    if (!target[u].live) continue;
    const RowAddresses to = row_addresses(job, target[u], job.head_dim, 4, sizeof(float));
    store_fp8_lane<kVector, kLanes>(to.values, fp8_codes(x[u], scale[u].inverse), lane);
    if (lane != 0) continue;
    if (to.scales != nullptr) {
      if (job.destination.slots != nullptr) {
        store_u32<kVector>(to.scales, __float_as_uint(scale[u].scale));  // 4 bytes of a page
      } else {
        *reinterpret_cast<float*>(to.scales) = scale[u].scale;  // an f32 view's element
      }
    }
    // The query form folds the scale into W.
    fold_weight(job.weights, view_row(at[u], target[u]), &scale[u].scale);
  }
}

// The kernel for launch_rows (rows_launch.cuh).
struct Fp8Rows {
  static constexpr int64_t kScaleElement = 4;  // bytes of an element of a scales view
  template <typename In, int kLanes, bool kVector, RopeStyle kStyle>
  static void launch(const RowJob& job, cudaStream_t stream) {
    const unsigned blocks = rows_launch::blocks_for(job, kLanes, kRowsPerGroup);
    fp8_rows_kernel<In, kLanes, kVector, kStyle><<<blocks, kBlockThreads, 0, stream>>>(job);
  }
};

}  // namespace

Status launch_fp8_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  return launch_rows<Fp8Rows>(job, stream, op);
}

}  // namespace flashindexer::cuda::quant
