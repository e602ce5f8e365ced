// SPDX-License-Identifier: Apache-2.0
// The machine's ceilings, measured in the process that benchmarks against them.
#pragma once

#include <string>

namespace flashindexer::cli {

struct Ceilings {
  double fma_gflops = 0;   // fp32 multiply-add throughput on all threads, GFLOP/s
  double read_gbytes = 0;  // streaming read bandwidth on all threads, GB/s
  const char* simd_target = "";
};

// Runs an fp32 FMA microkernel (the best SIMD target, independent accumulators) and a streaming
// SIMD sum over a buffer far larger than the caches, on `threads` OpenMP threads.
Ceilings measure_ceilings(int threads);

// The current GPU's ceilings (CUDA builds only): dense FP8 tensor-core throughput from a wgmma
// loop on shared-memory operands, and a 1 GiB device-to-device copy (read + write bytes).
struct CudaCeilings {
  double fp8_tflops = 0;
  double copy_gbytes = 0;
  std::string name;
  int sms = 0;
};
CudaCeilings measure_cuda_ceilings();

}  // namespace flashindexer::cli
