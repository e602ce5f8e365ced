// SPDX-License-Identifier: Apache-2.0
// sparse_mqa_logits / paged_sparse_mqa_logits on CUDA tensors: every valid column has the bits
// the CUDA dense logits op gives its key (so the sparse consumer selects from the dense numbers),
// -inf or untouched past end as asked, the columns past S * SBK never written, poisoned
// workspaces, page sizes 32/64/128, cb 8/16/32 (ratio 1 and 2), unaligned ks; indices naming
// no key read nothing outside the operands (compute-sanitizer runs these tests); FP8 and MXFP4
// (with out-of-span vectors: the sparse call's fix-up gives the dense call's bits).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpp/api/sparse_logits_cases.h"
#include "indexer_cases.h"
#include "mxfp4_cases.h"

namespace fitest {
namespace {

constexpr int kPad = 5;

// The sparse logits of p's rows (M rows, N keys) over the candidate blocks `cand` of block_size
// positions against the dense logits of every key, clean and not.
void expect_prefill_sparse_bits(const PrefillProblem& p, int64_t M, int64_t N,
                                const HostTensor& cand, int block_size) {
  const int sparse_block = block_size == 8 ? 8 : 16;
  HostTensor all_ks(DType::kI32, {M});
  HostTensor all_ke(DType::kI32, {M});
  all_ks.fill<int32_t>(0);
  all_ke.fill<int32_t>(static_cast<int32_t>(N));
  const DevicePrefill device(p);
  DeviceTensor device_all_ks = to_device(all_ks);
  DeviceTensor device_all_ke = to_device(all_ke);
  HostTensor dense = poisoned_logits(M, N);
  DeviceTensor device_dense = to_device(dense);
  FI_ASSERT_OK(mqa_logits(device_dense.view, device.q.view(), device.keys.view(),
                          device.weights.view, device_all_ks.view, device_all_ke.view,
                          LogitsOptions{true}));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(dense, device_dense);
  const int64_t S = cand.size(1) * (block_size / sparse_block);
  HostTensor indices(DType::kI32, {M, S});
  HostTensor end(DType::kI32, {M});
  FI_ASSERT_OK(candidate_blocks_to_sparse_indices(indices.view(), end.view(), cand.view(),
                                                  CandidateRows::prefill(p.ks.view(), p.ke.view()),
                                                  block_size, sparse_block));
  DeviceTensor device_indices = to_device(indices);
  DeviceTensor device_end = to_device(end);
  const DeviceBuffer workspace = poisoned_device_buffer(sparse_logits_cuda_workspace_size(M, S));
  for (bool clean : {true, false}) {
    HostTensor got = poisoned_logits(M, S * sparse_block + kPad);
    DeviceTensor device_got = to_device(got);
    FI_ASSERT_OK(sparse_mqa_logits(device_got.view, device.q.view(), device.keys.view(),
                                   device.weights.view, device_indices.view, device_end.view,
                                   CandidateRows::prefill(device.ks.view, device.ke.view),
                                   sparse_block, LogitsOptions{clean}, with_workspace(workspace)));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    to_host(got, device_got);
    EXPECT_TRUE(SparseLogitsMatch(got, dense, indices, end, sparse_block, clean,
                                  packed_firsts(p.ks, sparse_block)));
  }
}

TEST(SparseLogitsCuda, PrefillColumnsHaveTheDenseLogitsBits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (int heads : {32, 64}) {
      for (int block_size : {8, 16, 32}) {
        const int64_t M = rng.uniform_int(10, 90);
        const int64_t N = rng.uniform_int(100, 9000);
        const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 64, 1024}));
        SCOPED_TRACE(::testing::Message()
                     << kformat_name(format) << " H=" << heads << " M=" << M << " N=" << N
                     << " cb=" << block_size << " C=" << num_blocks);
        PrefillProblem p = make_prefill_problem(rng, format, M, N, heads, 128);
        if (format == KFormat::kMXFP4) {  // out-of-span vectors: the fix-up in both calls
          spread_scales(p.keys, N, 1, 7);
          spread_scales(p.q, M * heads, 3, 11);
        }
        std::vector<int64_t> row_blocks(M);
        for (int64_t t = 0; t < M; ++t) {
          const int64_t n = p.ke.data<int32_t>()[t] - p.ks.data<int32_t>()[t];
          row_blocks[t] = (n + block_size - 1) / block_size;
        }
        expect_prefill_sparse_bits(p, M, N, distinct_candidates(rng, M, num_blocks, row_blocks),
                                   block_size);
      }
    }
  }
}

// Rows that see every key of a workspace whose key count is not a multiple of the sparse block,
// every block a candidate: the last block reaches past the workspace's last key (its columns
// past the row's end), which the FP8 kernel's lanes must not read (compute-sanitizer runs this).
TEST(SparseLogitsCuda, PrefillLastBlockPastTheWorkspaceEnd) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (int heads : {32, 64}) {
      for (int block_size : {8, 16}) {
        const int64_t M = rng.uniform_int(1, 6);
        const int64_t N = 16 * rng.uniform_int(4, 200) + rng.uniform_int(1, block_size - 1);
        SCOPED_TRACE(::testing::Message() << kformat_name(format) << " H=" << heads << " M=" << M
                                          << " N=" << N << " cb=" << block_size);
        PrefillProblem p = make_prefill_problem(rng, format, M, N, heads, 128);
        p.ks.fill<int32_t>(0);
        p.ke.fill<int32_t>(static_cast<int32_t>(N));
        const int64_t blocks = (N + block_size - 1) / block_size;
        HostTensor cand(DType::kI32, {M, blocks});
        for (int64_t r = 0; r < M; ++r) {
          std::vector<int32_t> all(static_cast<size_t>(blocks));
          for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
          rng.shuffle(all);
          for (int64_t i = 0; i < blocks; ++i) cand.at<int32_t>({r, i}) = all[i];
        }
        expect_prefill_sparse_bits(p, M, N, cand, block_size);
      }
    }
  }
}

TEST(SparseLogitsCuda, DecodeColumnsHaveTheDenseLogitsBits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
      DecodeConfig config;
      config.format = format;
      config.batch = static_cast<int>(rng.uniform_int(1, 24));
      config.next_n = next_n;
      config.heads = next_n % 2 == 0 ? 64 : 32;
      config.two_dim_lens = rng.bernoulli(0.5);
      config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{32, 64, 128}));
      config.max_len = rng.uniform_int(10, 20000);
      const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16}));
      const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{8, 256}));
      SCOPED_TRACE(describe(config) + " cb=" + std::to_string(block_size));
      DecodeProblem p = make_decode_problem(rng, config);
      if (format == KFormat::kMXFP4) spread_decode(p, config.heads);
      const DevicePaged device(p);
      const int64_t rows = p.rows();
      const int64_t width = p.block_table.size(1) * config.page_size;
      HostTensor dense = poisoned_logits(rows, width);
      DeviceTensor device_dense = to_device(dense);
      FI_ASSERT_OK(device.run(device_dense, true));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      to_host(dense, device_dense);
      DecodeSparseColumns columns = decode_sparse_columns(rng, p, block_size, num_blocks);
      FI_ASSERT_OK(columns.status);
      HostTensor& indices = columns.indices;
      const HostTensor& end = columns.end;
      // A few indices naming no position of the table and a column past end: never read.
      for (int64_t r = 0; r < rows; ++r) {
        if (int64_t{num_blocks - 1} * block_size >= end.data<int32_t>()[r]) {
          indices.at<int32_t>({r, num_blocks - 1}) = r % 2 == 0 ? 1 << 28 : -5;
        }
      }
      DeviceTensor device_indices = to_device(indices);
      DeviceTensor device_end = to_device(end);
      const DeviceBuffer workspace =
          poisoned_device_buffer(sparse_logits_cuda_workspace_size(rows, num_blocks));
      for (bool clean : {true, false}) {
        HostTensor got = poisoned_logits(rows, num_blocks * block_size + kPad);
        DeviceTensor device_got = to_device(got);
        FI_ASSERT_OK(paged_sparse_mqa_logits(device_got.view, device.q.view(), device.cache.cache,
                                             device.weights.view, device_indices.view,
                                             device_end.view, device.block_table.view, block_size,
                                             LogitsOptions{clean}, with_workspace(workspace)));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(got, device_got);
        EXPECT_TRUE(SparseLogitsMatch(got, dense, indices, end, block_size, clean));
      }
    }
  }
}

TEST(SparseLogitsCuda, RefusesAMissingWorkspace) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 256, 32, 128);
  const DevicePrefill device(p);
  DeviceTensor indices = to_device(HostTensor(DType::kI32, {8, 4}));
  DeviceTensor end = to_device(HostTensor(DType::kI32, {8}));
  DeviceTensor logits = to_device(poisoned_logits(8, 32));
  EXPECT_TRUE(
      IsRejected(sparse_mqa_logits(logits.view, device.q.view(), device.keys.view(),
                                   device.weights.view, indices.view, end.view,
                                   CandidateRows::prefill(device.ks.view, device.ke.view), 8),
                 StatusCode::kWorkspaceTooSmall, {"workspace"}));
}

}  // namespace
}  // namespace fitest
