// indexer_prefill / indexer_decode on CUDA tensors, on both paths (dense and fused): equal to the
// dense GPU pair topk_per_row(mqa_logits) / topk_per_row(paged_mqa_logits), and to the CPU
// selection over the same GPU logits, for any workspace size (batches of rows); the fused path on
// rows longer than its candidate slots (gated) with adversarial scores, 1M-key rows and forced
// candidate overflows; bit-identical repeats; graph capture. The workspace-error test runs
// without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/heuristics.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/fused_indexer.h"
#include "support/compare.h"
#include "support/cuda.h"

namespace fitest {
namespace {

constexpr size_t kRecommendedSlab = size_t{256} << 20;  // what indexer_cuda_workspace_size adds

// A poisoned device workspace: the recommended size, or room for only `rows` logits rows of
// `width` keys (the op then runs many small batches).
DeviceBuffer indexer_workspace(int k, int64_t rows = 0, int64_t width = 0) {
  size_t bytes = indexer_cuda_workspace_size(k);
  if (rows > 0) bytes = bytes - kRecommendedSlab + rows * ((width + 255) / 256 * 256) * 4;
  DeviceBuffer buffer(bytes);
  EXPECT_EQ(buffer.error(), cudaSuccess);
  EXPECT_EQ(cudaMemset(buffer.get(), kPoisonByte, bytes), cudaSuccess);
  return buffer;
}

// A poisoned device workspace in which the fused path runs `rows` rows per batch (0: the
// recommended size), with `capacity` candidate slots per row (0: the default).
DeviceBuffer fused_workspace(int k, int64_t rows, int64_t width, int capacity = 0) {
  const size_t bytes = rows > 0 ? flashindexer::cuda::fused_indexer_workspace_size(
                                      rows, width, k, flashindexer::cuda::FusedConfig{capacity})
                                : indexer_cuda_workspace_size(k);
  DeviceBuffer buffer(bytes);
  EXPECT_EQ(buffer.error(), cudaSuccess);
  EXPECT_EQ(cudaMemset(buffer.get(), kPoisonByte, bytes), cudaSuccess);
  return buffer;
}

// The workspace for `path` with `rows` rows per batch (0: the recommended size).
DeviceBuffer path_workspace(IndexerPath path, int k, int64_t rows, int64_t width) {
  return path == IndexerPath::kFused ? fused_workspace(k, rows, width)
                                     : indexer_workspace(k, rows, width);
}

constexpr IndexerPath kPaths[] = {IndexerPath::kDense, IndexerPath::kFused};

const char* path_name(IndexerPath path) {
  return path == IndexerPath::kFused ? "fused" : path == IndexerPath::kDense ? "dense" : "auto";
}

RunOptions with_workspace(const DeviceBuffer& workspace, cudaStream_t stream = nullptr) {
  RunOptions options;
  options.cuda_stream = stream;
  options.workspace = workspace.get();
  options.workspace_bytes = workspace.bytes();
  return options;
}

// The dense pair's answer, selected on the CPU from the GPU's own logits: what the CUDA indexer
// must return exactly (set; order when sorted).
template <typename DeviceProblem>
HostTensor cpu_topk_of_gpu_logits(const DeviceProblem& device, int64_t rows, int64_t width,
                                  const RowRanges& host_ranges, int k, bool sorted) {
  HostTensor logits = poisoned_logits(rows, width);
  DeviceTensor device_logits = to_device(logits);
  const Status scored = device.run(device_logits, true);
  EXPECT_TRUE(scored.ok()) << status_text(scored);
  to_host(logits, device_logits);
  HostTensor expected = poisoned_topk_output(rows, k);
  const Status selected =
      topk_per_row(expected.view(), logits.view(), host_ranges, k, TopKOptions{sorted});
  EXPECT_TRUE(selected.ok()) << status_text(selected);
  return expected;
}

// cpu_topk_of_gpu_logits of a prefill problem over its own rows' ks / ke.
HostTensor cpu_topk_of_gpu_logits(const DevicePrefill& device, const PrefillProblem& p, int k,
                                  bool sorted) {
  return cpu_topk_of_gpu_logits(device, p.rows, p.num_keys,
                                RowRanges::prefill(p.ks.view(), p.ke.view()), k, sorted);
}

// The same selection by the dense GPU pair (mqa_logits + topk_per_row on the device).
template <typename DeviceProblem>
HostTensor gpu_dense_topk(const DeviceProblem& device, int64_t rows, int64_t width,
                          const RowRanges& device_ranges, int k, bool sorted) {
  HostTensor logits = poisoned_logits(rows, width);
  DeviceTensor device_logits = to_device(logits);
  EXPECT_TRUE(device.run(device_logits, false).ok());
  HostTensor out = poisoned_topk_output(rows, k);
  DeviceTensor device_out = to_device(out);
  const size_t bytes = topk_per_row_cuda_workspace_size(rows, width, k);
  DeviceBuffer workspace(bytes);
  const Status status = topk_per_row(device_out.view, device_logits.view, device_ranges, k,
                                     TopKOptions{sorted}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  to_host(out, device_out);
  return out;
}

// The op on `path`; with `capacity` > 0, the fused path's own entry with that many candidate
// slots per row (small inputs then exercise its overflow fallback).
HostTensor run_prefill(const DevicePrefill& device, int64_t rows, int k, bool sorted,
                       const DeviceBuffer& workspace, int64_t out_stride,
                       IndexerPath path = IndexerPath::kAuto, int capacity = 0) {
  HostTensor out = poisoned_topk_output(rows, k, out_stride);
  DeviceTensor device_out = to_device(out);
  const Status status =
      capacity > 0
          ? flashindexer::cuda::fused_indexer_prefill(
                device_out.view, device.q.view(), device.keys.view(), device.weights.view,
                device.ks.view, device.ke.view, k, sorted, with_workspace(workspace),
                flashindexer::cuda::FusedConfig{capacity})
          : indexer_prefill(device_out.view, device.q.view(), device.keys.view(),
                            device.weights.view, device.ks.view, device.ke.view, k,
                            TopKOptions{sorted}, IndexerOptions{path}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

HostTensor run_decode(const DevicePaged& device, int64_t rows, int k, bool sorted,
                      const DeviceBuffer& workspace, IndexerPath path = IndexerPath::kAuto,
                      int capacity = 0) {
  HostTensor out = poisoned_topk_output(rows, k, k + 3);
  DeviceTensor device_out = to_device(out);
  const Status status =
      capacity > 0
          ? flashindexer::cuda::fused_indexer_decode(
                device_out.view, device.q.view(), device.cache.cache, device.weights.view,
                device.context_lens.view, device.block_table.view, k, sorted,
                with_workspace(workspace), flashindexer::cuda::FusedConfig{capacity})
          : indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                           device.weights.view, device.context_lens.view,
                           device.block_table.view, k, TopKOptions{sorted},
                           IndexerOptions{path}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

// ----------------------------------------------------------------------------- prefill

TEST(IndexerPrefillCuda, EqualsTheDensePairForAnyWorkspace) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int heads : {32, 64}) {
    for (int k : {1, 100, 512, 2048}) {
      const int64_t rows = rng.uniform_int(60, 190);
      const int64_t keys = rng.uniform_int(2500, 9000);
      const bool sorted = index % 2 == 0;
      const bool ties = index % 3 == 0;
      ++index;
      SCOPED_TRACE(::testing::Message()
                   << "H=" << heads << " k=" << k << " rows=" << rows << " keys=" << keys
                   << " sorted=" << sorted << " ties=" << ties);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
      if (ties) add_ties(rng, p.keys, {KFormat::kFP8, heads, 128}, keys);
      const DevicePrefill device(p);
      const RowRanges host_ranges = RowRanges::prefill(p.ks.view(), p.ke.view());
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, rows, keys, host_ranges, k, sorted);
      const HostTensor dense = gpu_dense_topk(
          device, rows, keys, RowRanges::prefill(device.ks.view, device.ke.view), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      // Batches of 5 rows (not a whole scoring group), then the recommended workspace.
      for (IndexerPath path : kPaths) {
        for (int64_t batch_rows : {int64_t{5}, int64_t{0}}) {
          SCOPED_TRACE(::testing::Message() << path_name(path) << ", batch rows " << batch_rows);
          const DeviceBuffer workspace = path_workspace(path, k, batch_rows, keys);
          const HostTensor got = run_prefill(device, rows, k, sorted, workspace, k + 5, path);
          EXPECT_TRUE(SameTopK(got, expected, k, sorted));
          // Unsorted too, the same bits as the dense pair over all rows (ascending indices).
          EXPECT_TRUE(SameTopK(got, dense, k, true));
        }
      }
    }
  }
}

// Multi-request chunk (causal suffixes of two requests) with one long request's worth of keys.
TEST(IndexerPrefillCuda, MultiRequestChunkEqualsTheCpuSelection) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 300;
  const int64_t keys = 70000;
  const int k = 2048;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 64, 128);
  for (int64_t t = 0; t < rows; ++t) {
    const bool second = t >= rows / 2;
    p.ks.data<int32_t>()[t] = second ? 20001 : 0;
    p.ke.data<int32_t>()[t] = static_cast<int32_t>(second ? keys - rows + t + 1 : 19000 + t);
  }
  const DevicePrefill device(p);
  const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, true);
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, k, 64, keys);
    EXPECT_TRUE(
        SameTopK(run_prefill(device, rows, k, true, workspace, k, path), expected, k, true));
  }
}

TEST(IndexerPrefillCuda, IsBitIdenticalOverRepeatedRuns) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  // 30000 keys: the fused path gates its rows (more keys than its 8192 candidate slots).
  const int64_t keys = 30000;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 97, keys, 64, 128);
  add_ties(rng, p.keys, {KFormat::kFP8, 64, 128}, keys);
  const DevicePrefill device(p);
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, 512, 13, keys);
    const HostTensor first = run_prefill(device, 97, 512, false, workspace, 512, path);
    for (int run = 1; run < 20; ++run) {
      const HostTensor again = run_prefill(device, 97, 512, false, workspace, 512, path);
      ASSERT_EQ(std::memcmp(again.bytes(), first.bytes(), first.byte_size()), 0)
          << "run " << run << " differs";
    }
  }
}

TEST(IndexerPrefillCuda, RequiresAWorkspace) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the workspace is checked before anything touches the device.
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 256, 64, 128);
  HostTensor out = poisoned_topk_output(8, 16);
  const Status status = indexer_prefill(
      labelled_cuda(out.view()), labelled_cuda(p.q.view()), labelled_cuda(p.keys.view()),
      labelled_cuda(p.weights.view()), labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()), 16);
  EXPECT_TRUE(IsRejected(status, StatusCode::kWorkspaceTooSmall,
                         {"indexer_prefill", "workspace", "indexer_cuda_workspace_size"}));
}

TEST(IndexerPrefillCuda, FusedPathRequiresRoomForItsRowArrays) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the workspace is carved before anything touches the device. A workspace that
  // holds the dense path's slab for one row but not the fused path's per-row arrays, which lie
  // over it: rows of 9000 keys are gated, and one row's 8192 candidate slots take 64 KiB, more
  // than its 36 KiB of logits.
  FI_SEEDED_RNG(rng);
  const int64_t keys = 9000;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, keys, 64, 128);
  HostTensor out = poisoned_topk_output(8, 512);
  std::vector<uint8_t> host_workspace(indexer_cuda_workspace_size(512) - kRecommendedSlab +
                                      (keys + 255) / 256 * 256 * 4 + 4096);
  RunOptions options;
  options.workspace =
      host_workspace.data() + (16 - reinterpret_cast<uintptr_t>(host_workspace.data()) % 16) % 16;
  options.workspace_bytes = host_workspace.size() - 16;
  // The fused path asked for, or chosen by kAuto for rows the caller says are long.
  for (IndexerPath path : {IndexerPath::kFused, IndexerPath::kAuto}) {
    IndexerOptions indexer_options{path};
    indexer_options.min_row_keys =
        path == IndexerPath::kAuto ? flashindexer::heuristics::fused_min_row_keys(
                                         flashindexer::heuristics::kFusedMaxAutoK, false)
                                   : 0;
    const Status status = indexer_prefill(
        labelled_cuda(out.view()), labelled_cuda(p.q.view()), labelled_cuda(p.keys.view()),
        labelled_cuda(p.weights.view()), labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()),
        512, TopKOptions{}, indexer_options, options);
    EXPECT_TRUE(IsRejected(status, StatusCode::kWorkspaceTooSmall,
                           {"indexer_prefill", "workspace", "indexer_cuda_workspace_size"}))
        << path_name(path);
  }
}

TEST(IndexerWorkspace, SlabAndKeptRegionAreDisjointAlignedAndInside) {
  // Host arithmetic only (carve_slab never touches the memory): every workspace size from the
  // minimum up gives a slab of whole row units and a kept region, both 1 KiB aligned, disjoint,
  // inside the workspace, after the top-k scratch; the slab's region holds what the caller lays
  // over it (the fused path's candidates) when that is more than a row unit's logits.
  using flashindexer::cuda::carve_slab;
  using flashindexer::cuda::Slab;
  const int64_t width = 70000;
  const int k = 4096;
  const size_t keep_minimum = 300000;
  // A made-up, 1 KiB-aligned address: carve_slab only does arithmetic on it.
  void* const base = reinterpret_cast<void*>(uintptr_t{1} << 30);
  for (int64_t row_unit : {int64_t{1}, int64_t{3}}) {
    const size_t unit = static_cast<size_t>(row_unit) * (width + 255) / 256 * 256 * 4;
    for (size_t overlay_minimum : {size_t{0}, 2 * unit + 5}) {
      for (size_t extra : {size_t{0}, size_t{777}, size_t{5} << 20, size_t{300} << 20}) {
        SCOPED_TRACE(::testing::Message() << "row unit " << row_unit << ", overlay "
                                          << overlay_minimum << ", extra " << extra);
        RunOptions options;
        options.workspace = static_cast<uint8_t*>(base) + 16;
        options.workspace_bytes = flashindexer::cuda::topk_per_row_workspace_bound(k) + 5120 +
                                  std::max(unit, overlay_minimum) + keep_minimum + extra;
        Slab slab;
        const Status status = carve_slab(
            "test", options, width, k, row_unit, keep_minimum, overlay_minimum,
            [](size_t region) { return region / 2; }, &slab);
        ASSERT_TRUE(status.ok()) << status_text(status);
        const auto begin = reinterpret_cast<uintptr_t>(options.workspace);
        const auto end = begin + options.workspace_bytes;
        const auto slab_begin = reinterpret_cast<uintptr_t>(slab.logits);
        const auto slab_end = slab_begin + static_cast<size_t>(slab.rows) * slab.pitch * 4;
        const auto kept_begin = reinterpret_cast<uintptr_t>(slab.kept);
        const auto kept_end = kept_begin + slab.kept_bytes;
        EXPECT_GE(slab.rows, row_unit);
        EXPECT_EQ(slab.rows % row_unit, 0);
        EXPECT_GE(slab.kept_bytes, keep_minimum);
        EXPECT_GE(slab.logits_bytes, overlay_minimum);
        EXPECT_EQ(slab_begin % 1024, 0u);
        EXPECT_EQ(kept_begin % 1024, 0u);
        EXPECT_GE(slab_begin, begin + flashindexer::cuda::topk_per_row_workspace_bound(k));
        EXPECT_LE(slab_end, slab_begin + slab.logits_bytes);
        EXPECT_LE(slab_begin + slab.logits_bytes, kept_begin);
        EXPECT_LE(kept_end, end);
      }
    }
  }
}

// ----------------------------------------------------------------------------- decode

TEST(IndexerDecodeCuda, EqualsTheDensePairForAnyWorkspace) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      DecodeConfig config;
      config.heads = index % 2 == 0 ? 64 : 32;
      config.next_n = next_n;
      config.two_dim_lens = two_dim;
      config.batch = index % 3 == 0 ? 1 : 37;
      config.page_size = std::vector<int>{32, 64, 128}[index % 3];
      config.max_len = index % 3 == 0 ? 40000 : 3000;
      const int k = std::vector<int>{2048, 512, 64, 1024}[index % 4];
      const bool sorted = index % 2 == 1;
      ++index;
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      const DevicePaged device(p);
      const RowRanges host_ranges = RowRanges::decode(p.context_lens.view(), next_n);
      const HostTensor expected =
          cpu_topk_of_gpu_logits(device, p.rows(), p.width, host_ranges, k, sorted);
      const HostTensor dense =
          gpu_dense_topk(device, p.rows(), p.width,
                         RowRanges::decode(device.context_lens.view, next_n), k, sorted);
      EXPECT_TRUE(SameTopK(dense, expected, k, sorted));
      const int64_t table_width = p.block_table.size(1) * config.page_size;
      // One request per batch, then the recommended workspace.
      for (IndexerPath path : kPaths) {
        for (int64_t batch_rows : {int64_t{next_n}, int64_t{0}}) {
          SCOPED_TRACE(::testing::Message() << path_name(path) << ", batch rows " << batch_rows);
          const DeviceBuffer workspace = path_workspace(path, k, batch_rows, table_width);
          const HostTensor got = run_decode(device, p.rows(), k, sorted, workspace, path);
          EXPECT_TRUE(SameTopK(got, expected, k, sorted));
          // Unsorted too, the same bits as the dense pair over all rows (ascending indices).
          EXPECT_TRUE(SameTopK(got, dense, k, true));
        }
      }
    }
  }
}

TEST(IndexerDecodeCuda, FusedPathRejectsRowsOfMoreThan2To29Keys) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  // No GPU needed: the fused path checks its rows' width before anything touches the device (its
  // candidate queue holds a key's index in 29 bits). A block table of 2^29 / 64 + 1 pages.
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.batch = 1;
  config.heads = 64;
  DecodeProblem p = make_decode_problem(rng, config);
  HostTensor block_table(DType::kI32, {1, (int64_t{1} << 29) / config.page_size + 1});
  PagedKCache cache = p.cache.cache();
  cache.device = Device::kCUDA;
  HostTensor out = poisoned_topk_output(p.rows(), 16);
  const Status status =
      indexer_decode(labelled_cuda(out.view()), labelled_cuda(p.q.view()), cache,
                     labelled_cuda(p.weights.view()), labelled_cuda(p.context_lens.view()),
                     labelled_cuda(block_table.view()), 16, TopKOptions{},
                     IndexerOptions{IndexerPath::kFused});
  EXPECT_TRUE(IsRejected(status, StatusCode::kInvalidArgument,
                         {"indexer_decode", "fused path", "2^29 keys", "536870976"}));
}

TEST(IndexerDecodeCuda, GraphReplayGivesTheSameIndices) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.heads = 64;
  config.batch = 5;
  config.next_n = 2;
  config.max_len = 20000;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged device(p);
  const int k = 2048;
  for (IndexerPath path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const DeviceBuffer workspace = path_workspace(path, k, 4, p.block_table.size(1) * 64);
    const HostTensor direct = run_decode(device, p.rows(), k, false, workspace, path);

    HostTensor replayed = poisoned_topk_output(p.rows(), k, k + 3);
    DeviceTensor device_out = to_device(replayed);
    CapturedGraph graph;
    FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
      return indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                            device.weights.view, device.context_lens.view, device.block_table.view,
                            k, TopKOptions{}, IndexerOptions{path}, with_workspace(workspace, stream));
    }));
    ASSERT_EQ(graph.replay(3), cudaSuccess);
    to_host(replayed, device_out);
    EXPECT_EQ(std::memcmp(replayed.bytes(), direct.bytes(), direct.byte_size()), 0);
  }
}

// ----------------------------------------------------------------------------- fused, gated rows

// Score shapes that stress a sampled gate.
enum class Scores { kRandom, kTies, kCommonOffset, kSkewed, kNonFinite, kZeroRows };

const char* scores_name(Scores scores) {
  switch (scores) {
    case Scores::kRandom:
      return "random";
    case Scores::kTies:
      return "ties";
    case Scores::kCommonOffset:
      return "common offset";
    case Scores::kSkewed:
      return "skewed";
    case Scores::kZeroRows:
      return "zero query rows";
    default:
      return "NaN/inf";
  }
}

// Reshapes a prefill problem's scores: ties (repeated keys), a large common offset (every key is
// one base key with one byte changed, so scores differ in their last bits), skewed (a few keys
// scaled by 2^12), NaN and +-inf (infinite head weights on some rows: relu(x) x inf is inf, or
// NaN where x = 0), zero query rows (every key of such a row scores the same: all tie).
void shape_scores(Rng& rng, PrefillProblem& p, Scores scores) {
  const int64_t n = p.num_keys;
  const int64_t bytes = value_bytes_per_row(p.format, p.head_dim);
  uint8_t* values = p.keys.values.bytes();
  auto* scales = reinterpret_cast<float*>(p.keys.scales.bytes());
  switch (scores) {
    case Scores::kTies:
      add_ties(rng, p.keys, {p.format, p.heads, p.head_dim}, n);
      break;
    case Scores::kCommonOffset:
      for (int64_t i = 1; i < n; ++i) {
        std::memcpy(values + i * bytes, values, bytes);
        uint8_t& byte = values[i * bytes + rng.uniform_int(0, bytes - 1)];
        if ((byte & 0x7e) != 0x7e) byte ^= 0x01;  // never into e4m3's NaN (0x7f, 0xff)
        scales[i] = scales[0];
      }
      break;
    case Scores::kSkewed:
      for (int i = 0; i < 40; ++i) scales[rng.uniform_int(0, n - 1)] *= 4096.0f;
      break;
    case Scores::kNonFinite:
      for (int64_t t = 0; t < p.rows; t += 3) {
        for (int h = 0; h < p.heads; h += 5) {
          p.weights.data<float>()[t * p.heads + h] = h % 2 == 0 ? kInf : -kInf;
        }
      }
      break;
    case Scores::kZeroRows: {
      const int64_t row_bytes = p.heads * value_bytes_per_row(p.format, p.head_dim);
      for (int64_t t = 2; t < p.rows; t += 7) {
        std::memset(p.q.values.bytes() + t * row_bytes, 0, row_bytes);
      }
      break;
    }
    default:
      break;
  }
}

// The fused path's unsorted rows come in ascending index order (its candidates arrive in the
// order atomics were served; this order makes the answer repeat).
::testing::AssertionResult RowsInAscendingIndexOrder(const HostTensor& got, int k) {
  for (int64_t r = 0; r < got.size(0); ++r) {
    const std::vector<int32_t> row = topk_row(got, r, k);
    for (size_t i = 1; i < row.size() && row[i] >= 0; ++i) {
      if (row[i] <= row[i - 1]) {
        return ::testing::AssertionFailure()
               << "row " << r << ": column " << i << " holds " << row[i] << " after " << row[i - 1];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// The fused path's answer over `device` ([rows] x keys), `batch_rows` rows per batch (0: the
// recommended workspace) and `capacity` candidate slots per row (0: the default), equals
// `expected`; unsorted, in ascending index order too.
::testing::AssertionResult FusedPrefillEquals(const DevicePrefill& device, int64_t rows,
                                              int64_t keys, int k, bool sorted,
                                              int64_t batch_rows, const HostTensor& expected,
                                              int capacity = 0) {
  const DeviceBuffer workspace = fused_workspace(k, batch_rows, keys, capacity);
  const HostTensor got =
      run_prefill(device, rows, k, sorted, workspace, k, IndexerPath::kFused, capacity);
  ::testing::AssertionResult same = SameTopK(got, expected, k, sorted);
  if (!same || sorted) return same;
  return RowsInAscendingIndexOrder(got, k);
}

TEST(FusedIndexerCuda, GatedRowsEqualTheDensePair) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (Scores scores : {Scores::kRandom, Scores::kTies, Scores::kCommonOffset, Scores::kSkewed,
                        Scores::kNonFinite, Scores::kZeroRows}) {
    for (int k : {512, 2048, 4096}) {
      const int heads = index % 2 == 0 ? 64 : 32;
      const int64_t rows = rng.uniform_int(40, 90);
      const int64_t keys = rng.uniform_int(20000, 45000);
      const bool sorted = index % 2 == 1;
      ++index;
      SCOPED_TRACE(::testing::Message() << scores_name(scores) << " H=" << heads << " k=" << k
                                        << " rows=" << rows << " keys=" << keys);
      PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
      shape_scores(rng, p, scores);
      const DevicePrefill device(p);
      const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, sorted);
      for (int64_t batch_rows : {int64_t{7}, int64_t{0}}) {
        SCOPED_TRACE(::testing::Message() << "batch rows " << batch_rows);
        EXPECT_TRUE(FusedPrefillEquals(device, rows, keys, k, sorted, batch_rows, expected));
      }
    }
  }
}

// Candidate slots far too few (overflow) or fewer than k (never complete): every gated row takes
// the exact fallback, and the answer does not change.
TEST(FusedIndexerCuda, CandidateOverflowFallsBackExactly) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 45;
  const int64_t keys = 6000;
  for (int heads : {64, 32}) {  // the emitting scan's queues at both H (4 and 8 rows per tile)
    PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, heads, 128);
    add_ties(rng, p.keys, {KFormat::kFP8, heads, 128}, keys);
    const DevicePrefill device(p);
    for (int capacity : {300, 1000}) {
      for (int k : {64, 512}) {
        SCOPED_TRACE(::testing::Message()
                     << "H=" << heads << " capacity " << capacity << " k=" << k);
        const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, true);
        EXPECT_TRUE(FusedPrefillEquals(device, rows, keys, k, true, 6, expected, capacity));
      }
    }
  }
}

// Two rows of forty fall back (the short rows fit the candidate slots and take every key): the
// fallback's scoring spreads those rows' keys over many work items, and its top-k leaves every
// other row's answer alone.
TEST(FusedIndexerCuda, FewRowsFallingBackEqualTheCpuSelection) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 40;
  const int64_t keys = 6000;
  const int k = 64;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 64, 128);
  for (int64_t t = 0; t < rows; ++t) {
    // 90 keys (< the 100 slots) for most rows; about 470 of 6000 pass the gate of the long ones.
    const bool long_row = t == 3 || t == 29;
    const auto start = static_cast<int32_t>(long_row ? 0 : rng.uniform_int(0, keys - 90));
    p.ks.data<int32_t>()[t] = start;
    p.ke.data<int32_t>()[t] = long_row ? static_cast<int32_t>(keys - t) : start + 90;
  }
  const DevicePrefill device(p);
  const int capacity = 100;
  for (bool sorted : {true, false}) {
    const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, sorted);
    for (int64_t batch_rows : {int64_t{7}, int64_t{0}}) {
      SCOPED_TRACE(::testing::Message() << "sorted " << sorted << ", batch rows " << batch_rows);
      EXPECT_TRUE(
          FusedPrefillEquals(device, rows, keys, k, sorted, batch_rows, expected, capacity));
    }
  }
}

// The same for decode: the select hands the fallback each incomplete row's length (1-D and 2-D
// context lengths), and the fallback's top-k leaves every other row's answer alone. H = 64 with
// next_n 2 and 1, H = 32 with next_n 1: the emitting scan's two-tile and four-tile steps.
TEST(FusedIndexerCuda, DecodeCandidateOverflowFallsBackExactly) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  struct Form {
    int heads;
    int next_n;
    bool two_dim_lens;
  };
  for (const Form form :
       {Form{64, 2, false}, Form{64, 2, true}, Form{64, 1, false}, Form{32, 1, true}}) {
    DecodeConfig config;
    config.heads = form.heads;
    config.batch = 6;
    config.next_n = form.next_n;
    config.two_dim_lens = form.two_dim_lens;
    config.max_len = 6000;
    DecodeProblem p = make_decode_problem(rng, config);
    const DevicePaged device(p);
    const int k = 512;
    const HostTensor expected =
        cpu_topk_of_gpu_logits(device, p.rows(), p.width,
                               RowRanges::decode(p.context_lens.view(), config.next_n), k, true);
    for (int capacity : {300, 1000}) {
      SCOPED_TRACE(describe(config) + " capacity " + std::to_string(capacity));
      const DeviceBuffer workspace =
          fused_workspace(k, 0, p.block_table.size(1) * config.page_size, capacity);
      EXPECT_TRUE(SameTopK(
          run_decode(device, p.rows(), k, true, workspace, IndexerPath::kFused, capacity),
          expected, k, true));
    }
  }
}

TEST(FusedIndexerCuda, MillionKeyRows) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int64_t rows = 6;
  const int64_t keys = int64_t{1} << 20;
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 64, 128);
  const DevicePrefill device(p);
  const int k = 2048;
  const HostTensor expected = cpu_topk_of_gpu_logits(device, p, k, false);
  EXPECT_TRUE(FusedPrefillEquals(device, rows, keys, k, false, 0, expected));
}

TEST(FusedIndexerCuda, DecodeBatchesWithGatedRows) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  int index = 0;
  for (int batch : {1, 256}) {
    for (int next_n = 1; next_n <= 4; ++next_n) {
      DecodeConfig config;
      config.heads = index % 2 == 0 ? 64 : 32;
      config.batch = batch;
      config.next_n = next_n;
      config.two_dim_lens = index % 3 == 1;
      config.max_len = batch == 1 ? 70000 : 12000;  // > the 8192 candidate slots: gated
      const int k = std::vector<int>{2048, 512, 1024}[index % 3];
      const bool sorted = index % 2 == 0;
      ++index;
      SCOPED_TRACE(describe(config) + " k=" + std::to_string(k));
      DecodeProblem p = make_decode_problem(rng, config);
      const DevicePaged device(p);
      const HostTensor expected = cpu_topk_of_gpu_logits(
          device, p.rows(), p.width, RowRanges::decode(p.context_lens.view(), next_n), k, sorted);
      const DeviceBuffer workspace =
          fused_workspace(k, 0, p.block_table.size(1) * config.page_size);
      EXPECT_TRUE(SameTopK(run_decode(device, p.rows(), k, sorted, workspace, IndexerPath::kFused),
                           expected, k, sorted));
    }
  }
}

}  // namespace
}  // namespace fitest
