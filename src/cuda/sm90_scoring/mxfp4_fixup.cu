// SPDX-License-Identifier: Apache-2.0
// The exact fallback of MXFP4 scoring: after the scoring kernel, every NaN logit in a row's
// visible range is recomputed from the raw bytes (format_mxfp4.cuh: the converter marks a vector
// whose non-zero blocks span more binades than e4m3 holds by a NaN scale or weight, so the
// logits it enters come out NaN). A kernel of its own, with no barrier but the warp's: the
// fallback cannot stall the scoring pipeline. It costs a launch while the device has never
// flagged (g_mxfp4_out_of_span), then one read of the visible logits per call, plus one warp's
// H dot products per flagged logit.
//
// One warp per flagged logit, all lanes converged: lane l holds values 4 l .. 4 l + 3 of both
// vectors (block l / 8). A block's 32 products are multiples of 1/4 below 36 each, so their sum
// is exact in fp32 in any order; its power of two 2^(s_q + s_k - 254) is exact (or rounds once
// in the subnormals); the four block terms are added in block order, the heads in ascending
// order as relu(dot) x weight. The result depends on the (row, key) data alone: every schedule
// gives the same bits.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/format_sparse.cuh"
#include "cuda/sm90_scoring/row_range.cuh"

namespace flashindexer::cuda::scoring {
namespace {

constexpr int kFixupThreads = 256;
constexpr int kFixupKeys = 4096;  // columns of one row per CTA: 16 KiB of logits read
constexpr int kPackedRowBytes = 64;

// An E2M1 code (4 bits) as a float: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const float magnitude =
      m >= 2 ? __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22)) : 0.5f * m;
  return (code & 8u) != 0 ? -magnitude : magnitude;
}

// The logit of (row, key) from the raw operands; the whole warp calls it, converged.
template <bool kPaged>
__device__ float exact_logit(const ScoreParams& p, const Mxfp4Fixup& f, int64_t row, int32_t key,
                             int lane) {
  const uint8_t* key_values;
  const uint8_t* key_scales;
  if (f.sparse_block > 0) {
    const int32_t entry = p.block_table[row * p.table_stride_b + (key >> p.page_shift)];
    const int32_t offset = key & (f.sparse_block - 1);
    if (f.cache != nullptr) {
      const uint8_t* base = f.cache + (entry >> kSparseRowBits) * f.page_stride;
      const int32_t slot = (entry & ((1 << kSparseRowBits) - 1)) + offset;
      key_values = base + slot * kPackedRowBytes;
      key_scales = base + static_cast<int64_t>(f.cache_page_size) * kPackedRowBytes + slot * 4;
    } else {
      key_values = f.k_values + (entry + offset) * f.k_row_stride;
      key_scales = f.k_scales + (entry + offset) * f.k_scale_row_stride;
    }
  } else if constexpr (kPaged) {
    const int64_t request = row / p.rows_per_group;
    const int32_t page =
        p.block_table[request * p.table_stride_b + (key >> p.page_shift) * p.table_stride_p];
    const uint8_t* base = f.cache + page * f.page_stride;
    const int32_t slot = key & (p.page_size - 1);
    key_values = base + slot * kPackedRowBytes;
    key_scales = base + static_cast<int64_t>(p.page_size) * kPackedRowBytes + slot * 4;
  } else {
    key_values = f.k_values + key * f.k_row_stride;
    key_scales = f.k_scales + key * f.k_scale_row_stride;
  }
  const int block = lane / 8;
  const uint32_t k_codes = *reinterpret_cast<const uint16_t*>(key_values + 2 * lane);
  const int k_scale = key_scales[block];
  float k_value[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) k_value[n] = e2m1_value(k_codes >> (4 * n));
  const uint8_t* q_row = f.q_values + row * f.q_row_stride;
  const uint8_t* q_scale_row = f.q_scales + row * f.q_scale_row_stride;
  const float* weights = f.weights + row * f.weights_row_stride;
  float logit = 0.0f;
#pragma unroll 1
  for (int h = 0; h < f.heads; ++h) {
    const uint32_t q_codes =
        *reinterpret_cast<const uint16_t*>(q_row + h * f.q_head_stride + 2 * lane);
    float products = 0.0f;
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      products = __fmaf_rn(e2m1_value(q_codes >> (4 * n)), k_value[n], products);
    }
#pragma unroll
    for (int offset = 1; offset < 8; offset *= 2) {
      products += __shfl_xor_sync(0xffffffffu, products, offset);
    }
    const int q_scale = q_scale_row[h * 4 + block];
    const float term = ldexpf(products, q_scale + k_scale - 254);
    float dot = __shfl_sync(0xffffffffu, term, 0);
#pragma unroll
    for (int b = 1; b < 4; ++b) dot += __shfl_sync(0xffffffffu, term, 8 * b);
    logit = __fmaf_rn(weights[h], fmaxf(dot, 0.0f), logit);
  }
  return logit;
}

// The device's sticky out-of-span flag (Mxfp4Params::out_of_span): set by any MXFP4 scoring
// kernel that flags a vector, never reset. Until some call has flagged, the fix-up reads this word
// and exits, so calls on in-span data pay a launch, not a read of their logits; once set (any
// call, any stream), every later fix-up scans. A set flag never makes a fix-up wrong: it only
// recomputes NaN logits, exactly.
__device__ int g_mxfp4_out_of_span = 0;

// Work item w of the (row, chunk of kFixupKeys columns) items: each warp checks 32 of the row's
// visible columns at a time and recomputes the NaN ones, one after another. The grid is a few
// CTAs per SM that walk the items, so that a call with nothing flagged costs little.
template <bool kPaged>
__global__ void __launch_bounds__(kFixupThreads)
    mxfp4_fixup_kernel(const ScoreParams p, const Mxfp4Fixup f, int64_t chunks) {
  if (*reinterpret_cast<const volatile int*>(f.out_of_span) == 0) return;
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
#pragma unroll 1
  for (int64_t item = blockIdx.x; item < p.rows * chunks; item += gridDim.x) {
    const int64_t row = item / chunks;
    const int64_t chunk = item % chunks;
    int32_t lo = 0;
    int32_t hi = 0;
    row_range<kPaged>(p, row, lo, hi);
    const int32_t begin = static_cast<int32_t>(max(static_cast<int64_t>(lo), chunk * kFixupKeys));
    const int32_t end =
        static_cast<int32_t>(min(static_cast<int64_t>(hi), (chunk + 1) * kFixupKeys));
    float* logits = p.logits + row * p.logits_stride;
#pragma unroll 1
    for (int32_t first = begin + warp * 32; first < end; first += kFixupThreads) {
      const int32_t key = first + lane;
      const bool flagged = key < end && isnan(logits[key]);
      uint32_t pending = __ballot_sync(0xffffffffu, flagged);
#pragma unroll 1
      while (pending != 0) {
        const int j = __ffs(pending) - 1;
        pending &= pending - 1;
        const float value = exact_logit<kPaged>(p, f, row, first + j, lane);
        if (lane == 0) logits[first + j] = value;
      }
    }
  }
}

}  // namespace

int* mxfp4_out_of_span_flag() {
  void* address = nullptr;
  if (cudaGetSymbolAddress(&address, g_mxfp4_out_of_span) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return static_cast<int*>(address);
}

cudaError_t launch_mxfp4_fixup(const ScoreParams& params, const Mxfp4Fixup& operands, bool paged,
                               int sms, cudaStream_t stream) {
  if (params.rows == 0 || params.width == 0) return cudaSuccess;
  constexpr int kCtasPerSm = 8;  // 2048 threads an SM
  const int64_t chunks = (params.width + kFixupKeys - 1) / kFixupKeys;
  const dim3 grid(static_cast<unsigned>(
      std::min<int64_t>(params.rows * chunks, static_cast<int64_t>(kCtasPerSm) * sms)));
  if (paged) {
    mxfp4_fixup_kernel<true><<<grid, kFixupThreads, 0, stream>>>(params, operands, chunks);
  } else {
    mxfp4_fixup_kernel<false><<<grid, kFixupThreads, 0, stream>>>(params, operands, chunks);
  }
  return cudaGetLastError();
}

}  // namespace flashindexer::cuda::scoring
