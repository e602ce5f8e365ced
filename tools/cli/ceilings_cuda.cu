// SPDX-License-Identifier: Apache-2.0
// The GPU's ceilings for `flashindexer bench --device cuda`, measured in the benchmarking
// process: dense FP8 tensor-core throughput (a wgmma loop on shared-memory operands, no memory
// traffic) and device-memory bandwidth (a device-to-device copy, read + write bytes).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cli/ceilings.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma_e4m3.cuh"

namespace flashindexer::cli {
namespace {

namespace ptx = cuda::ptx;

constexpr int kWarpgroups = 2;  // two issuing warpgroups keep the tensor cores busy across waits
constexpr int kThreads = 128 * kWarpgroups;
constexpr int kN = 256;  // m64 n256 k32: the largest e4m3 wgmma
constexpr int kMmasPerCommit = 8;
constexpr int kABytes = 64 * 128;  // 64 rows x 128 bytes (4 k-steps of 32), 128-byte swizzle
constexpr int kBBytes = kN * 128;
constexpr int kSharedBytes = kABytes + kBBytes + 1024;  // + room to align the tiles to 1024

// Each warpgroup runs `commits` x kMmasPerCommit wgmmas on the same tiles; the accumulators'
// sum is stored so that nothing is optimised away.
__global__ void __launch_bounds__(kThreads, 1) fp8_wgmma_loop(int commits, float* sink) {
  extern __shared__ uint8_t shared_raw[];
  uint8_t* tiles = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                              ~static_cast<uintptr_t>(1023));
  uint8_t* a = tiles;
  uint8_t* b = tiles + kABytes;
  // Finite e4m3 codes of mixed magnitude and sign (no NaN code: 0x7f / 0xff), so the tensor
  // cores see ordinary data, not zeros.
  for (int i = threadIdx.x; i < kABytes + kBBytes; i += kThreads) {
    const uint32_t hash = static_cast<uint32_t>(i) * 2654435761u;
    tiles[i] = static_cast<uint8_t>((hash >> 24) & 0xbf) | 0x08;
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> wgmma reads
  __syncthreads();
  float acc[kN / 2] = {};
  for (int c = 0; c < commits; ++c) {
    ptx::wgmma_fence();
#pragma unroll
    for (int m = 0; m < kMmasPerCommit; ++m) {
      const uint32_t k_offset = 32 * (m % 4);
      ptx::WgmmaE4M3<kN>::mma(acc, ptx::smem_descriptor_k128_swizzle128(a, k_offset),
                              ptx::smem_descriptor_k128_swizzle128(b, k_offset), true);
    }
    ptx::wgmma_commit_group();
    ptx::wgmma_wait_group<0>();
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) sum += acc[i];
  sink[blockIdx.x * kThreads + threadIdx.x] = sum;
}

// Best of `trials` timings of fn on the default stream, in ms.
template <typename Fn>
float best_ms(Fn fn, int trials) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best = 1e30f;
  for (int t = 0; t < trials; ++t) {
    cudaEventRecord(start);
    fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace

CudaCeilings measure_cuda_ceilings() {
  CudaCeilings result;
  int device = 0;
  cudaDeviceProp properties{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&properties, device) != cudaSuccess) {
    cudaGetLastError();
    return result;
  }
  result.name = properties.name;
  result.sms = properties.multiProcessorCount;

  // Copy bandwidth: 1 GiB device to device, read + write bytes.
  const size_t bytes = size_t{1} << 30;
  void *from = nullptr, *to = nullptr;
  if (cudaMalloc(&from, bytes) == cudaSuccess && cudaMalloc(&to, bytes) == cudaSuccess) {
    cudaMemset(from, 1, bytes);
    const float ms =
        best_ms([&] { cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice); }, 5);
    result.copy_gbytes = 2.0 * static_cast<double>(bytes) / (ms * 1e6);
  }
  cudaFree(from);
  cudaFree(to);

  // FP8 tensor throughput: one CTA of two warpgroups per SM.
  float* sink = nullptr;
  if (cudaFuncSetAttribute(fp8_wgmma_loop, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kSharedBytes) == cudaSuccess &&
      cudaMalloc(&sink, sizeof(float) * kThreads * result.sms) == cudaSuccess) {
    const int commits = 4096;
    auto launch = [&] { fp8_wgmma_loop<<<result.sms, kThreads, kSharedBytes>>>(commits, sink); };
    launch();  // warm-up (clocks up)
    const float ms = best_ms(launch, 3);
    const double flop = 2.0 * 64 * kN * 32 * kMmasPerCommit * static_cast<double>(commits) *
                        kWarpgroups * result.sms;
    if (cudaGetLastError() == cudaSuccess) result.fp8_tflops = flop / (ms * 1e9);
  }
  cudaFree(sink);
  cudaGetLastError();
  return result;
}

}  // namespace flashindexer::cli
