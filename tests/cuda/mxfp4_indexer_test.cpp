// SPDX-License-Identifier: Apache-2.0
// indexer_prefill / indexer_decode with MXFP4 operands on CUDA: every path (kDense, kFused, kAuto)
// equal to the dense pair topk_per_row(mqa_logits) bit for bit and to the CPU top-k of the GPU's
// logits; heavy ties, out-of-span vectors (the fix-up, and the fused path's fallback for the rows
// that meet one), decode batch 1 and 256, next_n 1..4, page sizes 32 / 64 / 128 and V4's wide
// page (the candidate consumer with MXFP4: candidates_test.cpp). The tests that run kernels skip
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "indexer_cases.h"

namespace fitest {
namespace {

constexpr int kHeadDim = 128;
constexpr int kBlocks = kHeadDim / kMxfp4BlockSize;
constexpr IndexerPath kAllPaths[] = {IndexerPath::kDense, IndexerPath::kFused, IndexerPath::kAuto};

// Every `every`-th vector from `first` gets block scales spanning 17 binades (out of span: the
// fix-up recomputes its logits) or, alternately, a zero block under scale 254.
void spread_scales(Operand& operand, int64_t vectors, int64_t first, int64_t every) {
  for (int64_t i = first, n = 0; i < vectors; i += every, ++n) {
    uint8_t* scales = operand.scales.bytes() + i * kBlocks;
    if (n % 2 == 0) {
      const int offsets[kBlocks] = {1, -16, 0, -3};
      for (int b = 0; b < kBlocks; ++b) scales[b] = static_cast<uint8_t>(127 + offsets[b]);
    } else {
      std::memset(operand.values.bytes() + i * kHeadDim / 2 + kMxfp4BlockSize, 0,
                  kMxfp4BlockSize / 2);
      scales[2] = 254;
    }
  }
}

void rewrite_cache(DecodeProblem& p) {
  const int page_size = p.config.page_size;
  for (int b = 0; b < p.config.batch; ++b) {
    for (int64_t s = 0; s < p.stored[b]; ++s) {
      const int64_t page = p.block_table.at<int32_t>({b, s / page_size});
      p.cache.write_slot(page * page_size + s % page_size, p.request_keys[b], s);
    }
  }
}

TEST(Mxfp4IndexerCuda, PrefillPathsEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int k : {64, 512, 2048}) {
      const int64_t rows = rng.uniform_int(60, 190);
      const int64_t keys = rng.uniform_int(2500, 9000);
      const bool sorted = index % 2 == 0;
      const bool ties = index % 3 == 0;
      ++index;
      SCOPED_TRACE(::testing::Message() << "H=" << heads << " k=" << k << " rows=" << rows
                                        << " keys=" << keys << " ties=" << ties);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
      if (ties) add_ties(rng, p.keys, {KFormat::kMXFP4, heads, kHeadDim}, keys);
      spread_scales(p.keys, keys, 5, 301);
      spread_scales(p.q, rows * heads, 7, 2003);
      const DevicePrefill device(p);
      const RowRanges host_ranges = RowRanges::prefill(p.ks.view(), p.ke.view());
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, rows, keys, host_ranges, k, sorted);
      const HostTensor dense = gpu_dense_topk(
          device, rows, keys, RowRanges::prefill(device.ks.view, device.ke.view), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      for (IndexerPath path : kAllPaths) {
        SCOPED_TRACE(path_name(path));
        const DeviceBuffer workspace = path_workspace(path, k, 0, keys);
        const HostTensor got = run_prefill(device, rows, k, sorted, workspace, k + 5, path);
        EXPECT_TRUE(SameTopK(got, expected, k, sorted));
        EXPECT_TRUE(SameTopK(got, dense, k, true));
      }
    }
  }
}

// next_n 1..4 x H 32 / 64 over page sizes 32 / 64 / 128, batch 1 (long), 64 and 256, V4's wide
// page every other case.
TEST(Mxfp4IndexerCuda, DecodePathsEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (int heads : {32, 64}) {
      DecodeConfig config;
      config.format = KFormat::kMXFP4;
      config.heads = heads;
      config.next_n = next_n;
      config.two_dim_lens = index % 2 == 0;
      config.batch = std::vector<int>{1, 64, 256}[index % 3];
      config.page_size = std::vector<int>{32, 64, 128}[(index + next_n) % 3];
      config.max_len = config.batch == 1 ? 40000 : config.batch == 64 ? 3000 : 1200;
      config.stride_pad_bytes = index % 2 == 1 ? config.page_size * (132 - 68) : 0;
      const int k = std::vector<int>{2048, 512, 64}[index % 3];
      const bool sorted = index % 2 == 1;
      ++index;
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      for (Operand& keys : p.request_keys) spread_scales(keys, keys.values.size(0), 2, 401);
      rewrite_cache(p);
      const DevicePaged device(p);
      const RowRanges host_ranges = RowRanges::decode(p.context_lens.view(), next_n);
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, p.rows(), p.width, host_ranges, k, sorted);
      const HostTensor dense =
          gpu_dense_topk(device, p.rows(), p.width,
                         RowRanges::decode(device.context_lens.view, next_n), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      const int64_t table_width = p.block_table.size(1) * config.page_size;
      for (IndexerPath path : kAllPaths) {
        SCOPED_TRACE(path_name(path));
        const DeviceBuffer workspace = path_workspace(path, k, 0, table_width);
        const HostTensor got = run_decode(device, p.rows(), k, sorted, workspace, path);
        EXPECT_TRUE(SameTopK(got, expected, k, sorted));
        EXPECT_TRUE(SameTopK(got, dense, k, true));
      }
    }
  }
}

// Which vectors of a fused-path case are out of span: none (every row selects from its
// candidates), a few queries' (their rows take the fallback), or a few keys' too (prefill: one key,
// so every row falls back; decode: every fourth request's keys, its rows alone).
enum class OutOfSpan { kNone, kQueries, kKeys };

const char* out_of_span_name(OutOfSpan mode) {
  return mode == OutOfSpan::kNone ? "in span" : mode == OutOfSpan::kQueries ? "queries" : "keys";
}

// The fused path with `capacity` candidate slots a row (few: every row gated, so sample, gate,
// scan, select and the fallback all run) against the dense pair, bit for bit, in batches of rows.
void check_fused_prefill(Rng& rng, int heads, OutOfSpan mode, int64_t rows, int64_t keys, int k,
                         bool sorted, int capacity) {
  SCOPED_TRACE(::testing::Message() << "prefill H=" << heads << " k=" << k << " rows=" << rows
                                    << " keys=" << keys << " " << out_of_span_name(mode));
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
  if (mode != OutOfSpan::kNone) spread_scales(p.q, rows * heads, 3, 1999);
  if (mode == OutOfSpan::kKeys) spread_scales(p.keys, keys, keys - keys / 16, keys);
  const DevicePrefill device(p);
  const HostTensor dense = gpu_dense_topk(
      device, rows, keys, RowRanges::prefill(device.ks.view, device.ke.view), k, sorted);
  // Two batches of rows or more, the converted operands beside them.
  const size_t bytes = flashindexer::cuda::fused_indexer_workspace_size(
                           rows / 2, keys, k, flashindexer::cuda::FusedConfig{capacity}) +
                       mqa_logits_cuda_workspace_size(rows, heads, keys) + 4096;
  const DeviceBuffer workspace = poisoned_device_buffer(bytes);
  const HostTensor got =
      run_prefill(device, rows, k, sorted, workspace, k, IndexerPath::kFused, capacity);
  EXPECT_TRUE(SameTopK(got, dense, k, true));
}

void check_fused_decode(Rng& rng, const DecodeConfig& config, OutOfSpan mode, int k, bool sorted,
                        int capacity) {
  SCOPED_TRACE(describe(config) + " k=" + std::to_string(k) + " " + out_of_span_name(mode));
  DecodeProblem p = make_decode_problem(rng, config);
  if (mode != OutOfSpan::kNone) {
    spread_scales(p.q, p.rows() * config.heads, 5, 7 * config.heads * config.next_n + 3);
  }
  if (mode == OutOfSpan::kKeys) {
    for (int b = 1; b < config.batch; b += 4) {
      Operand& keys = p.request_keys[b];
      spread_scales(keys, keys.values.size(0), keys.values.size(0) / 3, 1500);
    }
  }
  rewrite_cache(p);
  const DevicePaged device(p);
  const HostTensor dense =
      gpu_dense_topk(device, p.rows(), p.width,
                     RowRanges::decode(device.context_lens.view, config.next_n), k, sorted);
  const int64_t table_width = p.block_table.size(1) * config.page_size;
  const DeviceBuffer workspace = fused_workspace(k, p.rows(), table_width, capacity);
  const HostTensor got =
      run_decode(device, p.rows(), k, sorted, workspace, IndexerPath::kFused, capacity);
  EXPECT_TRUE(SameTopK(got, dense, k, true));
}

DecodeConfig fused_decode_config(int heads, int next_n, int batch, int max_len, int index) {
  DecodeConfig config;
  config.format = KFormat::kMXFP4;
  config.heads = heads;
  config.next_n = next_n;
  config.batch = batch;
  config.page_size = index % 2 == 0 ? 64 : 32;
  config.max_len = max_len;
  config.stride_pad_bytes = index % 3 == 0 ? config.page_size * (132 - 68) : 0;
  return config;
}

TEST(Mxfp4IndexerCuda, FusedSelectionAndFallbackEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  constexpr int kCapacity = 1024;
  int index = 0;
  for (int heads : {32, 64}) {
    for (OutOfSpan mode : {OutOfSpan::kNone, OutOfSpan::kQueries, OutOfSpan::kKeys}) {
      check_fused_prefill(rng, heads, mode, rng.uniform_int(120, 220), rng.uniform_int(9000, 14000),
                          index % 2 == 0 ? 256 : 64, index % 3 != 0, kCapacity);
      ++index;
    }
  }
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (int heads : {32, 64}) {
      for (OutOfSpan mode : {OutOfSpan::kNone, OutOfSpan::kQueries, OutOfSpan::kKeys}) {
        check_fused_decode(rng, fused_decode_config(heads, next_n, 24, 9000, index), mode,
                           index % 2 == 0 ? 256 : 512, index % 3 != 1, kCapacity);
        ++index;
      }
    }
  }
}

// A few small cases of the test above, for the race checker: prefill at H = 32, decode at
// next_n 1 (register keys, H = 64) and 4 (the converting format's N = 256 tiles).
TEST(Mxfp4IndexerCuda, SmallFusedCasesEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  constexpr int kCapacity = 256;
  check_fused_prefill(rng, 32, OutOfSpan::kQueries, 48, 2500, 64, true, kCapacity);
  check_fused_decode(rng, fused_decode_config(64, 1, 4, 2500, 0), OutOfSpan::kKeys, 64, true,
                     kCapacity);
  check_fused_decode(rng, fused_decode_config(64, 4, 4, 2500, 1), OutOfSpan::kQueries, 64, false,
                     kCapacity);
}

// Batches of rows through a small workspace: each batch's query scales are its own rows'.
TEST(Mxfp4IndexerCuda, SmallWorkspaceBatchesEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int k = 256;
  const int64_t rows = 300;
  const int64_t keys = 20000;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, 64, kHeadDim);
  const DevicePrefill device(p);
  const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, true);
  // Room for the top-k scratch and a few dozen rows of logits at a time.
  const DeviceBuffer workspace = indexer_workspace(k, 40, keys);
  const HostTensor got = run_prefill(device, rows, k, true, workspace, k, IndexerPath::kDense);
  EXPECT_TRUE(SameTopK(got, expected, k, true));
}

// Many batches of rows, each scored through the FP8 kernel from the converted operands at the
// workspace's end (the keys converted by the first batch only), out-of-span vectors in both
// operands: the same answer as the dense pair over the converting kernel's logits.
TEST(Mxfp4IndexerCuda, ConvertedOperandBatchesEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int k = 256;
  const int64_t rows = 300;
  const int64_t keys = 20000;
  for (int heads : {32, 64}) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads);
    PrefillProblem p = make_prefill_problem(rng, KFormat::kMXFP4, rows, keys, heads, kHeadDim);
    spread_scales(p.keys, keys, 3, 257);
    spread_scales(p.q, rows * heads, 11, 1501);
    const DevicePrefill device(p);
    const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, true);
    // About 40 rows of logits a batch besides the operands.
    const size_t bytes = indexer_cuda_workspace_size(k) - kRecommendedSlab +
                         mqa_logits_cuda_workspace_size(80, heads, keys) +
                         40 * ((keys + 255) / 256 * 256) * 4;
    const DeviceBuffer workspace = poisoned_device_buffer(bytes);
    const HostTensor got = run_prefill(device, rows, k, true, workspace, k, IndexerPath::kDense);
    EXPECT_TRUE(SameTopK(got, expected, k, true));
  }
}

// Which batches a prefill call's workspace gives (host code, no GPU): an MXFP4 call keeps its
// converted operands at the end when a batch still holds a scoring group of rows, and the slab
// and the operands do not overlap; an FP8 call, or a workspace too small, keeps the plain slab.
TEST(Mxfp4IndexerCuda, ConvertedOperandsTakeTheWorkspaceEnd) {
  namespace cuda = flashindexer::cuda;
  struct Batches {
    cuda::Slab slab;
    int64_t rows = 0;
  };
  const int k = 2048;
  auto carve_for = [&](int64_t width) {
    return [width](const RunOptions& from, Batches* batches) {
      const Status status = cuda::carve_slab(
          "test", from, width, k, 1, 0, 0, [](size_t) { return size_t{0}; }, &batches->slab);
      batches->rows = batches->slab.rows;
      return status;
    };
  };
  alignas(16) static unsigned char anchor[16];
  auto run = [&](DType dtype, int64_t rows, int heads, int64_t width, size_t bytes,
                 Batches* batches, cuda::ConvertedOperands* converted) {
    const int64_t dim = dtype == DType::kE2M1x2 ? kHeadDim / 2 : kHeadDim;
    const QuantizedTensor q{
        TensorView::contiguous(anchor, dtype, {rows, heads, dim}, Device::kCUDA), {}};
    RunOptions options;
    options.workspace = anchor;
    options.workspace_bytes = bytes;
    return cuda::carve_prefill_batches(options, q, width, 256 / heads, carve_for(width), batches,
                                       converted);
  };
  const size_t recommended = indexer_cuda_workspace_size(k);
  for (int heads : {32, 64}) {
    SCOPED_TRACE(::testing::Message() << "H=" << heads);
    Batches plain, batches;
    cuda::ConvertedOperands none, converted;
    ASSERT_TRUE(run(DType::kE4M3, 4096, heads, 131072, recommended, &plain, &none).ok());
    EXPECT_EQ(none.workspace, nullptr);
    ASSERT_TRUE(run(DType::kE2M1x2, 4096, heads, 131072, recommended, &batches, &converted).ok());
    ASSERT_NE(converted.workspace, nullptr);
    EXPECT_FALSE(converted.keys_ready);
    EXPECT_GE(batches.rows, 256 / heads);
    EXPECT_LT(batches.rows, plain.rows);
    EXPECT_GE(converted.bytes, cuda::mqa_logits_workspace_size(
                                   std::min<int64_t>(batches.rows, 4096), heads, 131072));
    const auto* start = static_cast<unsigned char*>(converted.workspace);
    const auto* slab_end = reinterpret_cast<unsigned char*>(batches.slab.logits) +
                           batches.rows * batches.slab.pitch * sizeof(float);
    EXPECT_LE(slab_end, start);
    EXPECT_EQ(start + converted.bytes, anchor + recommended);
    // Room for a few rows of logits only: the operands of 131072 keys do not fit beside them.
    Batches small;
    cuda::ConvertedOperands refused;
    const size_t few_rows = recommended - kRecommendedSlab + 16 * 131072 * 4;
    ASSERT_TRUE(run(DType::kE2M1x2, 4096, heads, 131072, few_rows, &small, &refused).ok());
    EXPECT_EQ(refused.workspace, nullptr);
    EXPECT_GE(small.rows, 16);
  }
}

}  // namespace
}  // namespace fitest
