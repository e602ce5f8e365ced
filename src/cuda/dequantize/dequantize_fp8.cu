// SPDX-License-Identifier: Apache-2.0
// dequantize_k_fp8 on the GPU: out[r, d] = e4m3(values[r, d]) * scales[r].
//
// Memory-bound: 1 byte in, 4 bytes out per element. Each thread converts 16 consecutive values
// of a row (one 16-byte load, four 16-byte stores) when rows and pointers allow 16-byte access,
// else one value. The grid covers every (row, chunk) once; 256 threads per block keep enough
// loads in flight per SM without a persistent loop.
#include <cuda_fp8.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"

namespace flashindexer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChunk = 16;  // values per thread on the vectorized path

__device__ __forceinline__ float e4m3_value(uint8_t code) {
  __nv_fp8_e4m3 fp8;
  fp8.__x = code;
  return static_cast<float>(fp8);
}

// Two codes (low byte first) in one conversion instruction; fp8 -> fp16 -> fp32 is exact.
__device__ __forceinline__ float2 e4m3x2_values(uint16_t codes) {
  const __half2 pair(__nv_cvt_fp8x2_to_halfraw2(codes, __NV_E4M3));
  return __half22float2(pair);
}

template <int kValuesPerThread>
__global__ void __launch_bounds__(kThreads)
    dequantize_fp8_kernel(float* __restrict__ out, int64_t out_stride,
                          const uint8_t* __restrict__ values, int64_t value_stride,
                          const float* __restrict__ scales, int64_t scale_stride, int64_t rows,
                          int head_dim) {
  const int chunks_per_row = head_dim / kValuesPerThread;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= rows * chunks_per_row) return;
  const int64_t row = item / chunks_per_row;
  const int column = static_cast<int>(item % chunks_per_row) * kValuesPerThread;
  const float scale = scales[row * scale_stride];
  const uint8_t* in = values + row * value_stride + column;
  float* dst = out + row * out_stride + column;
  if constexpr (kValuesPerThread == kChunk) {
    const uint4 packed = *reinterpret_cast<const uint4*>(in);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 low = e4m3x2_values(static_cast<uint16_t>(words[w] & 0xFFFF));
      const float2 high = e4m3x2_values(static_cast<uint16_t>(words[w] >> 16));
      reinterpret_cast<float4*>(dst)[w] =
          make_float4(low.x * scale, low.y * scale, high.x * scale, high.y * scale);
    }
  } else {
    dst[0] = e4m3_value(in[0]) * scale;
  }
}

bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

}  // namespace

Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        void* stream) {
  const int64_t rows = values.shape[0];
  const int head_dim = static_cast<int>(values.shape[1]);
  if (rows == 0 || head_dim == 0) return Status::Ok();
  const bool vectorized = head_dim % kChunk == 0 && aligned16(out.data) && aligned16(values.data) &&
                          values.stride[0] % kChunk == 0 && out.stride[0] % 4 == 0;
  const int values_per_thread = vectorized ? kChunk : 1;
  const int64_t items = rows * (head_dim / values_per_thread);
  const unsigned blocks = static_cast<unsigned>((items + kThreads - 1) / kThreads);
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  if (vectorized) {
    dequantize_fp8_kernel<kChunk><<<blocks, kThreads, 0, cuda_stream>>>(
        out.ptr<float>(), out.stride[0], values.ptr<uint8_t>(), values.stride[0],
        scales.ptr<float>(), scales.stride[0], rows, head_dim);
  } else {
    dequantize_fp8_kernel<1><<<blocks, kThreads, 0, cuda_stream>>>(
        out.ptr<float>(), out.stride[0], values.ptr<uint8_t>(), values.stride[0],
        scales.ptr<float>(), scales.stride[0], rows, head_dim);
  }
  return launch_status("dequantize_k_fp8");
}

}  // namespace flashindexer::cuda
