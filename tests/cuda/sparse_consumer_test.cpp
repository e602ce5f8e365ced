// SPDX-License-Identifier: Apache-2.0
// The consumer indexer's sparse path on CUDA (candidates.h, IndexerOptions::candidates): it
// scores only the candidate blocks' keys, and must return the dense consumer's exact answer bit
// for bit (same per-key arithmetic, so the same logits bits, so the same selection). Compared
// against the dense path (IndexerPath::kDense, itself tested against the CPU consumer over the
// GPU's logits in candidates_test.cpp) on fresh random inputs: multi-request prefill chunks
// with unaligned ks, decode with next_n 1..4 in both length forms and every page size, cb 8, 16
// and 32 (ratio 1 and 2), duplicate, negative and out-of-range candidates, rows shorter than a
// block, candidate sets holding fewer than k positions, runs of identical keys (ties), small
// workspaces (many batches), poisoned outputs, repeats identical; FP8 and MXFP4 (with
// out-of-span vectors, which both paths recompute in the fix-up).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "indexer_cases.h"
#include "mxfp4_cases.h"

namespace fitest {
namespace {

// Candidate rows of `blocks` blocks each over rows of up to `row_blocks` blocks: mostly in-row
// block ids (with repeats), some -1, some past the row; a few rows with none at all.
HostTensor random_candidates(Rng& rng, int64_t rows, int num_blocks, int64_t row_blocks) {
  HostTensor cand(DType::kI32, {rows, num_blocks});
  for (int64_t r = 0; r < rows; ++r) {
    const bool none = rng.bernoulli(0.05);
    for (int i = 0; i < num_blocks; ++i) {
      int64_t value = rng.uniform_int(0, std::max<int64_t>(row_blocks - 1, 0));
      const double u = rng.uniform(0.0, 1.0);
      if (none || u < 0.08) {
        value = -1;
      } else if (u < 0.12) {
        value = rng.uniform_int(row_blocks, row_blocks + 1000);
      } else if (u < 0.2 && i > 0) {
        value = cand.at<int32_t>({r, i - 1});  // a repeat
      }
      cand.at<int32_t>({r, i}) = static_cast<int32_t>(value);
    }
  }
  return cand;
}

// Key rows [first, first + count) become copies of key row `from`: equal scores, tie order.
void repeat_key(Operand& keys, int64_t from, int64_t first, int64_t count) {
  const int64_t n = keys.values.size(0);
  const int64_t row_bytes = keys.values.size(1);
  const size_t scale_bytes = keys.scales.byte_size() / static_cast<size_t>(n);  // FP8 4, MXFP4 4
  for (int64_t r = first; r < std::min(first + count, n); ++r) {
    std::memcpy(&keys.values.at<uint8_t>({r, 0}), &keys.values.at<uint8_t>({from, 0}), row_bytes);
    std::memcpy(keys.scales.bytes() + r * scale_bytes, keys.scales.bytes() + from * scale_bytes,
                scale_bytes);
  }
}

constexpr KFormat kFormats[] = {KFormat::kFP8, KFormat::kMXFP4};

// Bytes of a workspace holding the top-k scratch and about `rows` rows of the sparse path's
// arrays and sparse logits (C x cb columns a row).
size_t small_sparse_workspace(int k, int num_blocks, int block_size, int64_t rows) {
  const int64_t columns = int64_t{num_blocks} * block_size;
  const size_t per_row = ((columns + 255) / 256 * 256 + 2 * (2 * num_blocks + 64) + 1) * 4;
  return flashindexer::cuda::topk_per_row_workspace_bound(k) + 8 * 1024 + rows * per_row;
}

TEST(SparseConsumerCuda, PrefillEqualsTheDenseConsumerBitForBit) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : kFormats) {
    for (int heads : {32, 64}) {
      for (int block_size : {8, 16, 32}) {
        const int64_t rows = rng.uniform_int(20, 130);
        const int64_t keys = rng.uniform_int(300, 20000);
        const int k = static_cast<int>(rng.pick(std::vector<int64_t>{1, 64, 512, 2048}));
        const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 64, 2048}));
        SCOPED_TRACE(::testing::Message()
                     << kformat_name(format) << " H=" << heads << " cb=" << block_size
                     << " rows=" << rows << " keys=" << keys << " k=" << k << " C=" << num_blocks);
        PrefillProblem p = make_prefill_problem(rng, format, rows, keys, heads, 128);
        repeat_key(p.keys, 0, keys / 3, 700);
        if (format == KFormat::kMXFP4) {  // out-of-span vectors: the fix-up in both paths
          spread_scales(p.keys, keys, 1, 7);
          spread_scales(p.q, rows * heads, 3, 11);
        }
        const DevicePrefill device(p);
        HostTensor cand =
            random_candidates(rng, rows, num_blocks, (keys + block_size - 1) / block_size);
        DeviceTensor device_cand = to_device(cand);
        for (bool sorted : {false, true}) {
          auto run = [&](IndexerPath path, size_t workspace_bytes) {
            IndexerOptions indexer_options;
            indexer_options.path = path;
            indexer_options.candidates = CandidateInput{device_cand.view, block_size, false};
            const DeviceBuffer workspace = poisoned_device_buffer(workspace_bytes);
            HostTensor out = poisoned_topk_output(rows, k, k + 4);
            DeviceTensor device_out = to_device(out);
            const Status status =
                indexer_prefill(device_out.view, device.q.view(), device.keys.view(),
                                device.weights.view, device.ks.view, device.ke.view, k,
                                TopKOptions{sorted}, indexer_options, with_workspace(workspace));
            EXPECT_TRUE(status.ok()) << status_text(status);
            EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            to_host(out, device_out);
            return out;
          };
          const HostTensor dense = run(IndexerPath::kDense, indexer_cuda_workspace_size(k));
          const HostTensor sparse = run(IndexerPath::kSparse, indexer_cuda_workspace_size(k));
          EXPECT_TRUE(SameTopK(sparse, dense, k, true)) << (sorted ? "sorted" : "unsorted");
          EXPECT_EQ(std::memcmp(sparse.bytes(), dense.bytes(), dense.byte_size()), 0);
          // Many small batches, and a repeat: the same bits.
          const HostTensor batched =
              run(IndexerPath::kSparse, small_sparse_workspace(k, num_blocks, block_size, 7));
          EXPECT_EQ(std::memcmp(batched.bytes(), dense.bytes(), dense.byte_size()), 0);
        }
      }
    }
  }
}

TEST(SparseConsumerCuda, DecodeEqualsTheDenseConsumerBitForBit) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (bool two_dim : {false, true}) {
      for (KFormat format : kFormats) {
        DecodeConfig config;
        config.format = format;
        config.batch = static_cast<int>(rng.uniform_int(1, 40));
        config.next_n = next_n;
        config.heads = rng.bernoulli(0.5) ? 64 : 32;
        config.two_dim_lens = two_dim;
        config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{32, 64, 128}));
        config.max_len = rng.uniform_int(5, 30000);
        const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16, 32}));
        const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{8, 256, 2048}));
        const int k = static_cast<int>(rng.pick(std::vector<int64_t>{16, 512, 2048}));
        SCOPED_TRACE(describe(config) + " cb=" + std::to_string(block_size) +
                     " C=" + std::to_string(num_blocks) + " k=" + std::to_string(k));
        DecodeProblem p = make_decode_problem(rng, config);
        if (format == KFormat::kMXFP4) spread_decode(p, config.heads);
        const DevicePaged device(p);
        const int64_t rows = p.rows();
        const int64_t width = p.block_table.size(1) * config.page_size;
        HostTensor cand =
            random_candidates(rng, rows, num_blocks, (width + block_size - 1) / block_size);
        DeviceTensor device_cand = to_device(cand);
        auto run = [&](IndexerPath path, size_t workspace_bytes, Status* status_out = nullptr) {
          IndexerOptions indexer_options;
          indexer_options.path = path;
          indexer_options.candidates = CandidateInput{device_cand.view, block_size, false};
          const DeviceBuffer workspace = poisoned_device_buffer(workspace_bytes);
          HostTensor out = poisoned_topk_output(rows, k, k + 3);
          DeviceTensor device_out = to_device(out);
          const Status status =
              indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                             device.weights.view, device.context_lens.view, device.block_table.view,
                             k, TopKOptions{true}, indexer_options, with_workspace(workspace));
          if (status_out != nullptr) {
            *status_out = status;
          } else {
            EXPECT_TRUE(status.ok()) << status_text(status);
          }
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          to_host(out, device_out);
          return out;
        };
        const HostTensor dense = run(IndexerPath::kDense, indexer_cuda_workspace_size(k));
        for (int repeat = 0; repeat < 3; ++repeat) {
          const HostTensor sparse = run(IndexerPath::kSparse, indexer_cuda_workspace_size(k));
          EXPECT_TRUE(SameTopK(sparse, dense, k, true));
          EXPECT_EQ(std::memcmp(sparse.bytes(), dense.bytes(), dense.byte_size()), 0);
        }
        // A workspace sized for the candidates alone: the sparse path runs (in batches of a
        // request); the dense path, which needs a logits row of the whole context, does not.
        const size_t small = small_sparse_workspace(k, num_blocks, block_size, next_n);
        const HostTensor batched = run(IndexerPath::kSparse, small);
        EXPECT_EQ(std::memcmp(batched.bytes(), dense.bytes(), dense.byte_size()), 0);
        if (width > int64_t{num_blocks} * block_size * 4 && width > 16384) {
          Status dense_status;
          run(IndexerPath::kDense, small, &dense_status);
          EXPECT_EQ(dense_status.code(), StatusCode::kWorkspaceTooSmall)
              << status_text(dense_status);
        }
      }
    }
  }
}

// V4.1-Flash's consumer numbers (H 32, cb 8, C 2048, k 512) at a decode batch of long contexts.
TEST(SparseConsumerCuda, V41FlashDecodeEqualsTheDenseConsumer) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.batch = 16;
  config.heads = 32;
  config.max_len = 100000;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged device(p);
  const int64_t rows = p.rows();
  const int64_t width = p.block_table.size(1) * config.page_size;
  HostTensor cand = random_candidates(rng, rows, 2048, (width + 7) / 8);
  DeviceTensor device_cand = to_device(cand);
  const DeviceBuffer workspace = poisoned_device_buffer(indexer_cuda_workspace_size(512));
  HostTensor results[2];
  for (int i = 0; i < 2; ++i) {
    IndexerOptions indexer_options;
    indexer_options.path = i == 0 ? IndexerPath::kDense : IndexerPath::kSparse;
    indexer_options.candidates = CandidateInput{device_cand.view, 8, false};
    results[i] = poisoned_topk_output(rows, 512);
    DeviceTensor device_out = to_device(results[i]);
    FI_ASSERT_OK(indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                                device.weights.view, device.context_lens.view,
                                device.block_table.view, 512, TopKOptions{true}, indexer_options,
                                with_workspace(workspace)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(results[i], device_out);
  }
  EXPECT_EQ(std::memcmp(results[1].bytes(), results[0].bytes(), results[0].byte_size()), 0);
}

}  // namespace
}  // namespace fitest
