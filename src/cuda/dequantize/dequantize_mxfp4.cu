// SPDX-License-Identifier: Apache-2.0
// dequantize_mxfp4 on the GPU: out[..., d] = e2m1(values) * 2^(scale byte - 127).
//
// Memory-bound (half a byte in, 4 bytes out per value): each thread turns eight values of a row
// (4 packed bytes, one scale byte) into two 16-byte stores when rows allow it, else stores one
// float at a time. The products are the CPU's: a table magnitude times a power of two, exact
// (subnormal results included, no flush to zero), and byte 255 scales to NaN as on the CPU.
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"
#include "cuda/quantize/lanes.cuh"

namespace flashindexer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kValuesPerThread = 8;

// The E2M1 value of the code's low four bits, built on the float bits (a table indexed by a
// register would live in local memory): index m >= 2 is (1 + (m & 1) / 2) * 2^((m >> 1) - 1),
// m = 1 is 0.5, and the sign bit moves to bit 31 (code 8 is -0, as on the CPU).
__device__ __forceinline__ float e2m1_value(uint32_t code) {
  const uint32_t m = code & 7u;
  const uint32_t magnitude =
      m >= 2u ? ((126u + (m >> 1)) << 23) | ((m & 1u) << 22) : (m == 1u ? 0x3F000000u : 0u);
  return __uint_as_float(magnitude | (code & 8u) << 28);
}

__device__ __forceinline__ float ue8m0_value(uint32_t byte) {
  return byte == 0xFFu ? __uint_as_float(0x7FC00000u) : quant::pow2(static_cast<int>(byte) - 127);
}

template <bool kVector>
__global__ void __launch_bounds__(kThreads)
    dequantize_mxfp4_kernel(float* __restrict__ out, quant::Rows out_rows,
                            const uint8_t* __restrict__ values, quant::Rows value_rows,
                            const uint8_t* __restrict__ scales, quant::Rows scale_rows,
                            int64_t rows, int head_dim) {
  const int chunks_per_row = head_dim / kValuesPerThread;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= rows * chunks_per_row) return;
  const int64_t row = quant::divide(item, chunks_per_row);
  const int first = static_cast<int>(item - row * chunks_per_row) * kValuesPerThread;
  const uint8_t* in = values + value_rows.offset(row) + first / 2;
  const float scale = ue8m0_value(scales[scale_rows.offset(row) + first / kMxfp4BlockSize]);
  uint32_t word;
  if constexpr (kVector) {
    word = *reinterpret_cast<const uint32_t*>(in);
  } else {
    word = in[0] | in[1] << 8 | in[2] << 16 | static_cast<uint32_t>(in[3]) << 24;
  }
  float x[kValuesPerThread];
#pragma unroll
  for (int k = 0; k < kValuesPerThread; ++k) x[k] = __fmul_rn(e2m1_value(word >> (4 * k)), scale);
  float* dst = out + out_rows.offset(row) + first;
  if constexpr (kVector) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(x[0], x[1], x[2], x[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(x[4], x[5], x[6], x[7]);
  } else {
#pragma unroll
    for (int k = 0; k < kValuesPerThread; ++k) dst[k] = x[k];
  }
}

}  // namespace

Status dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream) {
  const int64_t rows = quant::outer_rows_of(out);
  const int head_dim = static_cast<int>(out.shape[out.rank - 1]);
  if (rows == 0 || head_dim == 0) return Status::Ok();
  const bool vector = quant::rows_aligned(out, 16) && quant::rows_aligned(values, 4);
  const int64_t items = rows * (head_dim / kValuesPerThread);
  const unsigned blocks = static_cast<unsigned>((items + kThreads - 1) / kThreads);
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  const quant::Rows out_rows = quant::rows_of(out);
  const quant::Rows value_rows = quant::rows_of(values);
  const quant::Rows scale_rows = quant::rows_of(scales);
  if (vector) {
    dequantize_mxfp4_kernel<true><<<blocks, kThreads, 0, cuda_stream>>>(
        out.ptr<float>(), out_rows, values.ptr<uint8_t>(), value_rows, scales.ptr<uint8_t>(),
        scale_rows, rows, head_dim);
  } else {
    dequantize_mxfp4_kernel<false><<<blocks, kThreads, 0, cuda_stream>>>(
        out.ptr<float>(), out_rows, values.ptr<uint8_t>(), value_rows, scales.ptr<uint8_t>(),
        scale_rows, rows, head_dim);
  }
  return launch_status("dequantize_mxfp4");
}

}  // namespace flashindexer::cuda
