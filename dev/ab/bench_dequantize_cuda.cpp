// SPDX-License-Identifier: Apache-2.0
// Times dequantize_k_fp8 on the GPU against the same-run device-copy ceiling.
//
// Usage: bench_dequantize_cuda [rows]   (default 4M keys x 128: 512 MiB in, 2 GiB out)
// Prints one markdown row: keys, median ms, GB/s moved (bytes read + written), fraction of the
// cudaMemcpy device-to-device rate measured in the same run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flashindexer/flashindexer.h"

namespace fi = flashindexer;

namespace {

void check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

template <typename Launch>
float median_ms(Launch launch, int repeats) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (int i = 0; i < 3; ++i) launch();
  std::vector<float> times;
  for (int i = 0; i < repeats; ++i) {
    check(cudaEventRecord(start), "record");
    launch();
    check(cudaEventRecord(stop), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 22);
  constexpr int64_t kDim = 128;
  const size_t in_bytes = rows * kDim, out_bytes = rows * kDim * 4, scale_bytes = rows * 4;
  uint8_t* values;
  float *scales, *out;
  check(cudaMalloc(&values, in_bytes), "malloc");
  check(cudaMalloc(&scales, scale_bytes), "malloc");
  check(cudaMalloc(&out, out_bytes), "malloc");
  // Random codes (not zeros: zeros can run faster than real data); NaN codes included.
  std::vector<uint8_t> host(in_bytes);
  uint32_t state = 12345;
  for (uint8_t& code : host)
    code = static_cast<uint8_t>((state = state * 1664525u + 1013904223u) >> 24);
  check(cudaMemcpy(values, host.data(), in_bytes, cudaMemcpyHostToDevice), "copy");
  std::vector<float> host_scales(rows, 0.5f);
  check(cudaMemcpy(scales, host_scales.data(), scale_bytes, cudaMemcpyHostToDevice), "copy");

  const fi::TensorView out_view =
      fi::TensorView::contiguous(out, fi::DType::kF32, {rows, kDim}, fi::Device::kCUDA);
  const fi::TensorView values_view =
      fi::TensorView::contiguous(values, fi::DType::kE4M3, {rows, kDim}, fi::Device::kCUDA);
  const fi::TensorView scales_view =
      fi::TensorView::contiguous(scales, fi::DType::kF32, {rows}, fi::Device::kCUDA);
  const float ours = median_ms(
      [&] {
        const fi::Status status = fi::dequantize_k_fp8(out_view, values_view, scales_view);
        if (!status.ok()) {
          std::fprintf(stderr, "%s\n", status.message().c_str());
          std::exit(1);
        }
      },
      50);
  // Ceiling: a device-to-device copy of one half of `out` onto the other (bytes read + written).
  const size_t copy_bytes = out_bytes / 2;
  const float copy_ms = median_ms(
      [&] {
        check(cudaMemcpyAsync(out, reinterpret_cast<char*>(out) + copy_bytes, copy_bytes,
                              cudaMemcpyDeviceToDevice),
              "copy");
      },
      50);
  const double moved = static_cast<double>(in_bytes + out_bytes + scale_bytes);
  const double ours_gbs = moved / (ours * 1e6);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e6);
  std::printf("| keys | ours ms | ours GB/s | D2D copy GB/s | fraction of copy |\n");
  std::printf("|---|---|---|---|---|\n");
  std::printf("| %lld x %lld | %.3f | %.0f | %.0f | %.2f |\n", static_cast<long long>(rows),
              static_cast<long long>(kDim), ours, ours_gbs, copy_gbs, ours_gbs / copy_gbs);
  cudaFree(values);
  cudaFree(scales);
  cudaFree(out);
  return 0;
}
