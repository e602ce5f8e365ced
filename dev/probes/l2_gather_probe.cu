// SPDX-License-Identifier: Apache-2.0
// How fast can one H200 read candidate blocks gathered at random from an FP8 K cache that sits in
// L2? The V4.1 sparse consumer (issue "two-level indexer") reads, for each of its query rows, the
// keys of that row's 2048 candidate blocks of 8 keys (1024 value bytes and 32 scale bytes a
// block). At 131072 keys the whole cache (17 MB) fits the 50 MB L2, so the rows' reads come from
// L2 in a random order. This probe reads exactly those bytes with plain 16-byte loads and no
// arithmetic beyond an XOR that keeps them alive, to measure the gathered-read rate the consumer
// could at best reach, beside a device copy of 1 GiB in the same run.
//
//   build/l2_gather_probe (built with the tests when CUDA is), or
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a dev/probes/l2_gather_probe.cu \
//        -o l2_gather_probe && ./l2_gather_probe
//
// Block ids come from a hash of (row, slot), so no id list competes with the cache for L2.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kBlockKeys = 8;
constexpr int kValueBytes = kBlockKeys * 128;  // 1024
constexpr int kScaleBytes = kBlockKeys * 4;    // 32
constexpr int kThreads = 256;

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t e = (call);                                                          \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

__device__ __forceinline__ uint32_t hash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// One warp a (row, slot) item: 32 lanes x 2 x 16 bytes of values, and 2 lanes x 16 bytes of
// scales. kItems items in flight a warp. random: block = hash % blocks; else consecutive blocks.
template <int kItems>
__global__ void __launch_bounds__(kThreads)
    gather(const uint4* values, const uint4* scales, uint32_t blocks, uint64_t items, bool random,
           uint4* out) {
  const int lane = threadIdx.x % 32;
  const uint64_t warp = (blockIdx.x * uint64_t{kThreads} + threadIdx.x) / 32;
  const uint64_t warps = gridDim.x * uint64_t{kThreads} / 32;
  uint4 acc = make_uint4(0, 0, 0, 0);
  for (uint64_t base = warp * kItems; base < items; base += warps * kItems) {
    uint4 v[kItems][2];
    uint4 s[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const uint64_t item = base + i < items ? base + i : items - 1;
      const uint32_t block = random ? hash(static_cast<uint32_t>(item)) % blocks
                                    : static_cast<uint32_t>(item % blocks);
      const uint4* b = values + uint64_t{block} * (kValueBytes / 16);
      v[i][0] = __ldg(b + lane);
      v[i][1] = __ldg(b + 32 + lane);
      s[i] = lane < 2 ? __ldg(scales + uint64_t{block} * (kScaleBytes / 16) + lane)
                      : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      acc.x ^= v[i][0].x ^ v[i][1].x ^ s[i].x;
      acc.y ^= v[i][0].y ^ v[i][1].y ^ s[i].y;
      acc.z ^= v[i][0].z ^ v[i][1].z ^ s[i].z;
      acc.w ^= v[i][0].w ^ v[i][1].w ^ s[i].w;
    }
  }
  out[blockIdx.x * kThreads + threadIdx.x] = acc;
}

float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

template <typename Launch>
float median_ms(Launch&& launch, int iters) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  float times[64];
  for (int i = 0; i < iters; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    times[i] = time_ms(a, b);
  }
  for (int i = 0; i < iters; ++i) {
    for (int j = i + 1; j < iters; ++j) {
      if (times[j] < times[i]) {
        const float t = times[i];
        times[i] = times[j];
        times[j] = t;
      }
    }
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return times[iters / 2];
}

}  // namespace

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // The copy: 1 GiB device to device (read + write counted).
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  CHECK(cudaMalloc(&src, copy_bytes));
  CHECK(cudaMalloc(&dst, copy_bytes));
  CHECK(cudaMemset(src, 1, copy_bytes));
  const float copy_ms = median_ms(
      [&] { CHECK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); }, 15);
  std::printf("device copy 1 GiB: %.4f ms, %.0f GB/s copied (%.0f GB/s read + write)\n", copy_ms,
              copy_bytes / copy_ms / 1e6, 2.0 * copy_bytes / copy_ms / 1e6);

  uint4* out = nullptr;
  const int grid_max = sms * 8;
  CHECK(cudaMalloc(&out, sizeof(uint4) * grid_max * kThreads));
  const uint64_t rows = 4096, slots = 2048;
  const uint64_t items = rows * slots;
  struct Case {
    const char* name;
    uint32_t keys;
    bool random;
  };
  const Case cases[] = {{"131072 keys (17 MB, L2), random blocks", 131072, true},
                        {"131072 keys (17 MB, L2), consecutive blocks", 131072, false},
                        {"1048576 keys (138 MB, HBM), random blocks", 1048576, true},
                        {"1048576 keys (138 MB, HBM), consecutive blocks", 1048576, false}};
  for (const Case& c : cases) {
    const uint32_t blocks = c.keys / kBlockKeys;
    uint4 *values = nullptr, *scales = nullptr;
    CHECK(cudaMalloc(&values, size_t{blocks} * kValueBytes));
    CHECK(cudaMalloc(&scales, size_t{blocks} * kScaleBytes));
    CHECK(cudaMemset(values, 3, size_t{blocks} * kValueBytes));
    CHECK(cudaMemset(scales, 5, size_t{blocks} * kScaleBytes));
    const double bytes = static_cast<double>(items) * (kValueBytes + kScaleBytes);
    for (int per_sm : {4, 8}) {
      const float ms = median_ms(
          [&] {
            gather<4><<<sms * per_sm, kThreads>>>(values, scales, blocks, items, c.random, out);
            CHECK(cudaGetLastError());
          },
          15);
      std::printf(
          "%s, %d CTAs an SM, 4 items a warp: %.4f ms, %.0f GB/s gathered (%.2fx the "
          "copy's rate, %.2fx its read + write rate)\n",
          c.name, per_sm, ms, bytes / ms / 1e6, (bytes / ms) / (copy_bytes / copy_ms),
          (bytes / ms) / (2.0 * copy_bytes / copy_ms));
    }
    CHECK(cudaFree(values));
    CHECK(cudaFree(scales));
  }
  CHECK(cudaFree(out));
  CHECK(cudaFree(src));
  CHECK(cudaFree(dst));
  return 0;
}
