// SPDX-License-Identifier: Apache-2.0
// MXFP4 prefill scoring through the FP8 kernel: when the caller's workspace holds the operands as
// e4m3, one pass converts the packed keys and queries there, and the FP8 prefill kernel scores
// them. The pass computes what the converting format's warps write into their stages
// (format_mxfp4.cuh): each vector's blocks shifted from its reference exponent (the largest scale
// over its non-zero blocks) into e4m3, in the natural k order, and its remaining power of two as
// the key's fp32 scale or folded into the query's weight (NaN when out of span, which the fix-up
// recomputes). The FP8 kernel then reads the very bytes, scales and weights the converting kernel
// computes with, through the same consumer code, so the logits have the same bits; its producer
// has no conversion to wait for (H64 4096 x 131072: the converting kernel 14.4 ms, FP8 8.4 ms).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/format_mxfp4.cuh"

namespace flashindexer::cuda::scoring {
namespace {

constexpr int kThreads = 256;

// Vector v of `vectors` (row v / heads, head v % heads) is converted by four consecutive lanes,
// lane % 4 = block; the warp stays converged (mxfp4::BlockShift shuffles and votes), so lanes past
// the vectors convert a zero block and store nothing.
struct Vectors {
  const uint8_t* values;  // packed E2M1, row / head strides in bytes
  int64_t row_stride;
  int64_t head_stride;
  const uint8_t* scales;  // UE8M0, a vector's four contiguous, heads 4 bytes apart
  int64_t scale_row_stride;
  int64_t vectors;
  int heads;
  uint8_t* out;  // e4m3 [vectors, 128]
  // Keys: the remaining power of two of vector v at key_scales[v]. Queries: weights_out[v] =
  // weights[row * weights_stride + head] times it.
  float* key_scales;
  const float* weights;
  int64_t weights_stride;
  float* weights_out;
  int* out_of_span;
};

__global__ void __launch_bounds__(kThreads) convert_vectors_kernel(const Vectors p) {
  const int b = threadIdx.x % 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads / 4;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 4;
  const int64_t rounds = (p.vectors + step - 1) / step;  // the same for every lane
#pragma unroll 1
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t v = first + round * step;
    const bool present = v < p.vectors;
    const int64_t row = present ? v / p.heads : 0;
    const int head = present ? static_cast<int>(v % p.heads) : 0;
    uint4 block = make_uint4(0, 0, 0, 0);
    uint32_t scale = 0;  // this block's byte (the scales may lie at any byte)
    if (present) {
      block = *reinterpret_cast<const uint4*>(p.values + row * p.row_stride + head * p.head_stride +
                                              b * mxfp4::kBlockBytes);
      scale = p.scales[row * p.scale_row_stride + head * 4 + b];
    }
    const mxfp4::BlockShift shift(block, scale << (8 * b), b);
    const uint2 table = mxfp4::magnitude_table(shift.shift);
    if (!present) continue;
    const uint2 e0 = mxfp4::expand_word(block.x, table);
    const uint2 e1 = mxfp4::expand_word(block.y, table);
    const uint2 e2 = mxfp4::expand_word(block.z, table);
    const uint2 e3 = mxfp4::expand_word(block.w, table);
    auto* out = reinterpret_cast<uint4*>(p.out + v * kHeadDim + 32 * b);
    out[0] = make_uint4(e0.x, e0.y, e1.x, e1.y);
    out[1] = make_uint4(e2.x, e2.y, e3.x, e3.y);
    if (b == 0) {
      if (p.key_scales != nullptr) {
        p.key_scales[v] = shift.remaining_scale(mxfp4::kKeyScaleBias);
      } else {
        p.weights_out[v] = p.weights[row * p.weights_stride + head] *
                           shift.remaining_scale(mxfp4::kQueryScaleBias);
      }
      if (shift.flagged) mxfp4::note_out_of_span({nullptr, 0, p.out_of_span});
    }
  }
}

cudaError_t launch_vectors(const Vectors& p, int sms, cudaStream_t stream) {
  if (p.vectors == 0) return cudaSuccess;
  constexpr int kCtasPerSm = 8;
  const int64_t needed = (p.vectors * 4 + kThreads - 1) / kThreads;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(needed, int64_t{kCtasPerSm} * sms));
  convert_vectors_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_mxfp4_preconvert(const Mxfp4Fixup& raw, const Mxfp4Preconvert& out, int sms,
                                    cudaStream_t stream) {
  // In Vectors' field order; the keys are vectors of one "head" a row, with scales out.
  const Vectors keys{raw.k_values,           raw.k_row_stride, 0, raw.k_scales,
                     raw.k_scale_row_stride, out.num_keys,     1, out.keys_out,
                     out.key_scales_out,     nullptr,          0, nullptr,
                     out.out_of_span};
  if (const cudaError_t error = launch_vectors(keys, sms, stream); error != cudaSuccess) {
    return error;
  }
  // The queries: (row, head) vectors, into weights_out.
  const Vectors q{raw.q_values,
                  raw.q_row_stride,
                  raw.q_head_stride,
                  raw.q_scales,
                  raw.q_scale_row_stride,
                  out.rows * raw.heads,
                  raw.heads,
                  out.q_out,
                  nullptr,
                  raw.weights,
                  raw.weights_row_stride,
                  out.weights_out,
                  out.out_of_span};
  return launch_vectors(q, sms, stream);
}

}  // namespace flashindexer::cuda::scoring
