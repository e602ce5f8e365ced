// SPDX-License-Identifier: Apache-2.0
// dequantize_k_fp8 on CUDA tensors against the CPU op (which is exact): every element equal.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "support/cuda.h"

namespace {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

template <typename T>
T* device_copy(const std::vector<T>& host) {
  void* device = nullptr;
  EXPECT_EQ(cudaMalloc(&device, host.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(device);
}

// Dequantizes random codes (every e4m3 code, NaN included) with rows of `row_stride` bytes and
// output rows of `out_stride` floats on the GPU; compares bit for bit with the CPU op.
void expect_gpu_matches_cpu(int64_t rows, int head_dim, int64_t row_stride, int64_t out_stride) {
  const uint64_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message()
               << "seed " << seed << " rows " << rows << " D " << head_dim << " value stride "
               << row_stride << " out stride " << out_stride);
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> codes(rows * row_stride);
  for (uint8_t& code : codes) code = static_cast<uint8_t>(rng());
  std::vector<float> scales(rows);
  for (float& scale : scales) scale = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20);

  TensorView values = TensorView::contiguous(codes.data(), DType::kE4M3, {rows, head_dim})
                          .with_row_stride(row_stride);
  const TensorView host_scales = TensorView::contiguous(scales.data(), DType::kF32, {rows});
  std::vector<float> expected(rows * out_stride, 0.0f);
  ASSERT_TRUE(
      dequantize_k_fp8(TensorView::contiguous(expected.data(), DType::kF32, {rows, head_dim})
                           .with_row_stride(out_stride),
                       values, host_scales)
          .ok());

  uint8_t* device_codes = device_copy(codes);
  float* device_scales = device_copy(scales);
  std::vector<float> poison(rows * out_stride, 12345.0f);
  float* device_out = device_copy(poison);
  values.data = device_codes;
  values.device = Device::kCUDA;
  TensorView scales_view = host_scales;
  scales_view.data = device_scales;
  scales_view.device = Device::kCUDA;
  const TensorView out =
      TensorView::contiguous(device_out, DType::kF32, {rows, head_dim}, Device::kCUDA)
          .with_row_stride(out_stride);
  const Status status = dequantize_k_fp8(out, values, scales_view);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> got(rows * out_stride);
  ASSERT_EQ(cudaMemcpy(got.data(), device_out, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < out_stride; ++d) {
      const float want = d < head_dim ? expected[r * out_stride + d] : 12345.0f;
      const float have = got[r * out_stride + d];
      if (std::isnan(want) && std::isnan(have)) continue;  // NaN payloads are not a contract
      ASSERT_EQ(std::memcmp(&want, &have, sizeof want), 0)
          << "row " << r << " column " << d << ": expected " << want << ", got " << have;
    }
  }
  cudaFree(device_codes);
  cudaFree(device_scales);
  cudaFree(device_out);
}

TEST(DequantizeCuda, MatchesCpuBitForBitOnVectorizedRows) {
  SKIP_WITHOUT_GPU();
  expect_gpu_matches_cpu(4099, 128, 128, 128);
  expect_gpu_matches_cpu(77, 64, 64, 64);
}

TEST(DequantizeCuda, MatchesCpuOnPaddedAndUnalignedRows) {
  SKIP_WITHOUT_GPU();
  expect_gpu_matches_cpu(513, 128, 144, 132);  // padded rows, both strides 16-byte friendly
  expect_gpu_matches_cpu(300, 128, 131, 129);  // odd strides: the scalar path
}

TEST(DequantizeCuda, EmptyInputIsANoOp) {
  SKIP_WITHOUT_GPU();
  const TensorView out = TensorView::contiguous(nullptr, DType::kF32, {0, 128}, Device::kCUDA);
  const TensorView values = TensorView::contiguous(nullptr, DType::kE4M3, {0, 128}, Device::kCUDA);
  const TensorView scales = TensorView::contiguous(nullptr, DType::kF32, {0}, Device::kCUDA);
  EXPECT_TRUE(dequantize_k_fp8(out, values, scales).ok());
}

}  // namespace
