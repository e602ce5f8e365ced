// SPDX-License-Identifier: Apache-2.0
// The candidate ops on CUDA tensors (candidates.h): bit-identical to the CPU ops (themselves
// tested against the reference in tests/cpp/api/candidates_test.cpp) on fresh random and
// adversarial inputs, poisoned outputs and workspaces, 20 repeats identical; and the consumer
// form of indexer_prefill / indexer_decode equal to the CPU consumer over the GPU's own logits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpp/api/candidates_cases.h"
#include "indexer_cases.h"

namespace fitest {
namespace {

struct DeviceCase {
  DeviceTensor logits;
  DeviceTensor ks;
  DeviceTensor ke;
  DeviceTensor candidates;
  BoundsForm form;
  int row_repeat;

  explicit DeviceCase(const CandidateCase& c)
      : logits(to_device(c.logits)),
        ke(to_device(c.ke)),
        candidates(to_device(c.candidates)),
        form(c.form),
        row_repeat(c.row_repeat) {
    if (c.form == BoundsForm::kPrefill) ks = to_device(c.ks);
  }
  CandidateRows bounds() const {
    return form == BoundsForm::kPrefill ? CandidateRows::prefill(ks.view, ke.view, row_repeat)
                                        : CandidateRows::decode(ke.view, row_repeat);
  }
};

std::vector<int32_t> all_i32(const HostTensor& t) {
  const int32_t* p = t.data<int32_t>();
  return std::vector<int32_t>(p, p + t.byte_size() / sizeof(int32_t));
}

struct Shape {
  BoundsForm form;
  int64_t rows;
  int64_t width;
  int block_size;
  int num_blocks;
  int row_repeat;
};

std::vector<Shape> gpu_shapes(Rng& rng) {
  return {
      {BoundsForm::kPrefill, 12, 5, 8, 4, 1},
      {BoundsForm::kPrefill, 16, 37, 8, 16, 1},
      {BoundsForm::kPrefill, 40, 20000, 8, 256, 1},
      {BoundsForm::kPrefill, 16, 9000, 16, 1024, 2},
      {BoundsForm::kDecode, 8, 70000, 8, 2048, 1},  // few rows: the top-k splits rows
      {BoundsForm::kDecode, 24, 3333, 8, 16, 3},
      {BoundsForm::kDecode2D, 16, 2600, 8, 64, 4},
      {BoundsForm::kDecode, 8, 2000, 1, 4096, 2},
      {BoundsForm::kPrefill, 8, 0, 8, 4, 1},
      {rng.pick(std::vector<BoundsForm>{BoundsForm::kPrefill, BoundsForm::kDecode}),
       rng.uniform_int(8, 64), rng.uniform_int(1, 30000), static_cast<int>(rng.uniform_int(1, 32)),
       static_cast<int>(rng.uniform_int(1, 4096)), static_cast<int>(rng.uniform_int(1, 4))},
  };
}

HostTensor gpu_select(const CandidateCase& c, const DeviceCase& d) {
  HostTensor out = poisoned_topk_output(c.rows, c.num_blocks + 3);
  DeviceTensor device_out = to_device(out);
  const DeviceBuffer workspace = poisoned_device_buffer(
      select_candidate_blocks_cuda_workspace_size(c.rows, c.width, c.num_blocks, c.block_size));
  RunOptions options = with_workspace(workspace);
  const Status status = select_candidate_blocks(device_out.view, d.logits.view, d.bounds(),
                                                c.num_blocks, c.block_size, options);
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

TEST(CandidateBlocksCuda, SelectionIsBitIdenticalToTheCpuAndRepeats) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (const Shape& s : gpu_shapes(rng)) {
    for (Fill fill : {Fill::kRandom, Fill::kFewTies, Fill::kSpecial}) {
      CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size,
                                            s.num_blocks, s.row_repeat, fill);
      SCOPED_TRACE(c.describe() + " fill " + std::to_string(static_cast<int>(fill)));
      HostTensor expected = poisoned_topk_output(c.rows, c.num_blocks + 3);
      FI_ASSERT_OK(select_candidate_blocks(expected.view(), c.logits.view(), c.bounds(),
                                           c.num_blocks, c.block_size));
      const DeviceCase d(c);
      const HostTensor got = gpu_select(c, d);
      ASSERT_EQ(all_i32(got), all_i32(expected));
      if (fill == Fill::kSpecial) {
        for (int run = 0; run < 20; ++run) ASSERT_EQ(all_i32(gpu_select(c, d)), all_i32(got));
      }
    }
  }
}

TEST(CandidateMaskCuda, IsBitIdenticalToTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (const Shape& s : gpu_shapes(rng)) {
    CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size, s.num_blocks,
                                          s.row_repeat, Fill::kSpecial, 0.3);
    SCOPED_TRACE(c.describe());
    HostTensor expected = copy_of(c.logits);
    FI_ASSERT_OK(
        apply_candidate_mask(expected.view(), c.bounds(), c.candidates.view(), c.block_size));
    const DeviceCase d(c);
    FI_ASSERT_OK(apply_candidate_mask(d.logits.view, d.bounds(), d.candidates.view, c.block_size));
    HostTensor got = copy_of(c.logits);
    to_host(got, d.logits);
    ASSERT_EQ(std::memcmp(got.bytes(), expected.bytes(), got.byte_size()), 0);
  }
}

HostTensor gpu_consumer(const CandidateCase& c, const DeviceCase& d, int k, bool sorted,
                        bool vllm) {
  HostTensor out = poisoned_topk_output(c.rows, k + 2);
  DeviceTensor device_out = to_device(out);
  const DeviceBuffer workspace = poisoned_device_buffer(
      candidate_topk_per_row_cuda_workspace_size(c.rows, c.width, c.num_blocks, c.block_size, k));
  const Status status = candidate_topk_per_row(
      device_out.view, d.logits.view, d.bounds(), d.candidates.view, c.block_size, k,
      CandidateTopKOptions{sorted, vllm}, with_workspace(workspace));
  EXPECT_TRUE(status.ok()) << status_text(status);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

TEST(CandidateTopKCuda, ExactAndVllmCompatibleAreBitIdenticalToTheCpuAndRepeat) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (const Shape& s : gpu_shapes(rng)) {
    for (Fill fill : {Fill::kRandom, Fill::kSpecial}) {
      CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size,
                                            s.num_blocks, s.row_repeat, fill, 0.2);
      const int k = static_cast<int>(std::min<int64_t>(
          kMaxTopK,
          rng.pick(std::vector<int64_t>{1, 512, 2048, int64_t{c.num_blocks} * c.block_size + 3})));
      for (bool vllm : {false, true}) {
        for (bool sorted : {false, true}) {
          SCOPED_TRACE(c.describe() + " k=" + std::to_string(k) + (vllm ? " vllm" : " exact") +
                       (sorted ? " sorted" : " unsorted"));
          HostTensor expected = poisoned_topk_output(c.rows, k + 2);
          HostTensor cpu_logits = copy_of(c.logits);
          FI_ASSERT_OK(candidate_topk_per_row(expected.view(), cpu_logits.view(), c.bounds(),
                                              c.candidates.view(), c.block_size, k,
                                              CandidateTopKOptions{sorted, vllm}));
          const DeviceCase d(c);
          const HostTensor got = gpu_consumer(c, d, k, sorted, vllm);
          ASSERT_EQ(all_i32(got), all_i32(expected));
          if (!vllm && sorted && fill == Fill::kSpecial) {
            for (int run = 0; run < 20; ++run) {
              ASSERT_EQ(all_i32(gpu_consumer(c, d, k, sorted, vllm)), all_i32(got));
            }
          }
        }
      }
    }
  }
}

TEST(SparseIndicesCuda, IndicesEndAndRemapAreBitIdenticalToTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int block_size : {8, 16, 32}) {
    for (int sparse_block : {8, 16}) {
      if (block_size % sparse_block != 0 || block_size / sparse_block > 2) continue;
      for (BoundsForm form : {BoundsForm::kPrefill, BoundsForm::kDecode}) {
        const int C = static_cast<int>(rng.pick(std::vector<int64_t>{1, 16, 512, 2048, 4096}));
        CandidateCase c =
            make_candidate_case(rng, form, 40, rng.uniform_int(1, 40000), block_size, C,
                                static_cast<int>(rng.uniform_int(1, 4)), Fill::kRandom, 0.2);
        SCOPED_TRACE(c.describe() + " SBK=" + std::to_string(sparse_block));
        const int64_t S = int64_t{C} * (block_size / sparse_block);
        HostTensor expected(DType::kI32, {c.rows, S});
        HostTensor expected_end(DType::kI32, {c.rows});
        FI_ASSERT_OK(candidate_blocks_to_sparse_indices(expected.view(), expected_end.view(),
                                                        c.candidates.view(), c.bounds(), block_size,
                                                        sparse_block));
        const DeviceCase d(c);
        HostTensor got = poisoned_topk_output(c.rows, S);
        HostTensor end(DType::kI32, {c.rows});
        end.fill<int32_t>(kPoisonIndex);
        DeviceTensor device_got = to_device(got);
        DeviceTensor device_end = to_device(end);
        FI_ASSERT_OK(candidate_blocks_to_sparse_indices(device_got.view, device_end.view,
                                                        d.candidates.view, d.bounds(), block_size,
                                                        sparse_block));
        to_host(got, device_got);
        to_host(end, device_end);
        ASSERT_EQ(all_i32(got), all_i32(expected));
        ASSERT_EQ(all_i32(end), all_i32(expected_end));
        // Remap of random columns (in place on the device), against the CPU.
        const int k = 300;
        HostTensor columns(DType::kI32, {c.rows, k});
        for (int64_t i = 0; i < c.rows * k; ++i) {
          columns.data<int32_t>()[i] =
              static_cast<int32_t>(rng.uniform_int(-2, S * sparse_block + 2));
        }
        HostTensor remapped(DType::kI32, {c.rows, k});
        FI_ASSERT_OK(sparse_topk_remap(remapped.view(), columns.view(), expected.view(), c.bounds(),
                                       sparse_block));
        DeviceTensor device_columns = to_device(columns);
        FI_ASSERT_OK(sparse_topk_remap(device_columns.view, device_columns.view, device_got.view,
                                       d.bounds(), sparse_block));
        HostTensor got_remapped(DType::kI32, {c.rows, k});
        to_host(got_remapped, device_columns);
        ASSERT_EQ(all_i32(got_remapped), all_i32(remapped));
      }
    }
  }
}

// V4.1-Flash numbers: cb 8, C 2048, k 512, 64 rows of 131072 keys (a decode batch).
TEST(CandidateTopKCuda, V41FlashShapeIsBitIdenticalToTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  CandidateCase c =
      make_candidate_case(rng, BoundsForm::kDecode, 64, 131072, 8, 2048, 1, Fill::kRandom, 0.0);
  HostTensor expected = poisoned_topk_output(c.rows, 2048 + 3);
  FI_ASSERT_OK(select_candidate_blocks(expected.view(), c.logits.view(), c.bounds(), 2048, 8));
  const DeviceCase d(c);
  ASSERT_EQ(all_i32(gpu_select(c, d)), all_i32(expected));
  for (bool sorted : {false, true}) {
    HostTensor expected_topk = poisoned_topk_output(c.rows, 512 + 2);
    FI_ASSERT_OK(candidate_topk_per_row(expected_topk.view(), c.logits.view(), c.bounds(),
                                        c.candidates.view(), 8, 512,
                                        CandidateTopKOptions{sorted, false}));
    ASSERT_EQ(all_i32(gpu_consumer(c, d, 512, sorted, false)), all_i32(expected_topk));
  }
}

// ----------------------------------------------------------------------------- the indexer

// Candidate rows for a problem's rows: the CPU source's selection on the GPU's own logits, with
// duplicates, -1 and out-of-range entries mixed in.
HostTensor source_candidates(Rng& rng, const HostTensor& logits, const CandidateRows& rows,
                             int64_t count, int num_blocks, int block_size) {
  HostTensor cand(DType::kI32, {count, num_blocks});
  EXPECT_TRUE(
      select_candidate_blocks(cand.view(), logits.view(), rows, num_blocks, block_size).ok());
  for (int64_t i = 0; i < count * num_blocks; ++i) {
    if (rng.bernoulli(0.1)) {
      cand.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(-3, 100000));
    }
  }
  return cand;
}

// FP8 and MXFP4 operands; the MXFP4 exact calls take the sparse path (kSparse), and each batch
// reads its own rows' query scales.
TEST(IndexerConsumerCuda, PrefillEqualsTheCpuConsumerOverTheGpuLogits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (int heads : {32, 64}) {
      for (bool vllm : {false, true}) {
        const int64_t rows = rng.uniform_int(60, 150);
        const int64_t keys = rng.uniform_int(3000, 12000);
        const int k = static_cast<int>(rng.pick(std::vector<int64_t>{64, 512, 2048}));
        const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{16, 128, 2048}));
        const bool mxfp4 = format == KFormat::kMXFP4;
        SCOPED_TRACE(::testing::Message() << (mxfp4 ? "MXFP4" : "FP8") << " H=" << heads
                                          << " rows=" << rows << " keys=" << keys << " k=" << k
                                          << " C=" << num_blocks << (vllm ? " vllm" : " exact"));
        PrefillProblem p = make_prefill_problem(rng, format, rows, keys, heads, 128);
        const DevicePrefill device(p);
        HostTensor logits = poisoned_logits(rows, keys);
        DeviceTensor device_logits = to_device(logits);
        FI_ASSERT_OK(device.run(device_logits, false));
        to_host(logits, device_logits);
        const CandidateRows host_rows = CandidateRows::prefill(p.ks.view(), p.ke.view());
        HostTensor cand = source_candidates(rng, logits, host_rows, rows, num_blocks, 8);
        DeviceTensor device_cand = to_device(cand);
        for (bool sorted : {false, true}) {
          HostTensor expected = poisoned_topk_output(rows, k);
          HostTensor masked = copy_of(logits);
          FI_ASSERT_OK(candidate_topk_per_row(expected.view(), masked.view(), host_rows,
                                              cand.view(), 8, k,
                                              CandidateTopKOptions{sorted, vllm}));
          IndexerOptions indexer_options;
          indexer_options.candidates = CandidateInput{device_cand.view, 8, vllm};
          if (mxfp4 && !vllm) indexer_options.path = IndexerPath::kSparse;
          for (int64_t batch_rows : {int64_t{7}, int64_t{0}}) {
            SCOPED_TRACE(::testing::Message()
                         << "batch rows " << batch_rows << (sorted ? " sorted" : " unsorted"));
            // A workspace of about batch_rows rows: the top-k scratch bound, alignment slack,
            // then per row its logits and the consumer's arrays (many small batches).
            const size_t per_row =
                (keys + 255) / 256 * 256 * 4 + (num_blocks * 8 + 64) * 4 + num_blocks * 4 + 4 * 256;
            const DeviceBuffer workspace = poisoned_device_buffer(
                batch_rows == 0 ? indexer_cuda_workspace_size(k)
                                : flashindexer::cuda::topk_per_row_workspace_bound(k) + 8 * 1024 +
                                      batch_rows * per_row);
            HostTensor out = poisoned_topk_output(rows, k, k + 4);
            DeviceTensor device_out = to_device(out);
            FI_ASSERT_OK(indexer_prefill(device_out.view, device.q.view(), device.keys.view(),
                                         device.weights.view, device.ks.view, device.ke.view, k,
                                         TopKOptions{sorted}, indexer_options,
                                         with_workspace(workspace)));
            EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
            to_host(out, device_out);
            EXPECT_TRUE(SameTopK(out, expected, k, true));
          }
        }
      }
    }
  }
}

TEST(IndexerConsumerCuda, DecodeEqualsTheCpuConsumerOverTheGpuLogits) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (int next_n = 1; next_n <= 4; ++next_n) {
      for (bool two_dim : {false, true}) {
        DecodeConfig config;
        config.format = format;
        config.batch = static_cast<int>(rng.uniform_int(3, 40));
        config.next_n = next_n;
        config.heads = next_n % 2 == 0 ? 64 : 32;
        config.two_dim_lens = two_dim;
        config.max_len = rng.uniform_int(600, 9000);
        const bool vllm = rng.bernoulli(0.5);
        const int k = static_cast<int>(rng.pick(std::vector<int64_t>{100, 512}));
        SCOPED_TRACE(describe(config) + " k=" + std::to_string(k) + (vllm ? " vllm" : " exact"));
        DecodeProblem p = make_decode_problem(rng, config);
        const DevicePaged device(p);
        const int64_t rows = p.rows();
        const int64_t width = p.block_table.size(1) * config.page_size;
        HostTensor logits = poisoned_logits(rows, width);
        DeviceTensor device_logits = to_device(logits);
        FI_ASSERT_OK(device.run(device_logits, false));
        to_host(logits, device_logits);
        // The indexer's own row ends as [rows] lengths: the consumer's bounds.
        HostTensor ends(DType::kI32, {rows});
        for (int64_t r = 0; r < rows; ++r)
          ends.data<int32_t>()[r] = static_cast<int32_t>(p.ends[r]);
        const CandidateRows host_rows = CandidateRows::decode(ends.view());
        // The next_n rows of a request share one candidate row.
        HostTensor cand = source_candidates(rng, logits, host_rows, rows, 256, 8);
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(&cand.at<int32_t>({r, 0}), &cand.at<int32_t>({r - r % next_n, 0}), 256 * 4);
        }
        DeviceTensor device_cand = to_device(cand);
        HostTensor expected = poisoned_topk_output(rows, k);
        HostTensor masked = copy_of(logits);
        FI_ASSERT_OK(candidate_topk_per_row(expected.view(), masked.view(), host_rows, cand.view(),
                                            8, k, CandidateTopKOptions{true, vllm}));
        IndexerOptions indexer_options;
        indexer_options.candidates = CandidateInput{device_cand.view, 8, vllm};
        if (format == KFormat::kMXFP4 && !vllm) indexer_options.path = IndexerPath::kSparse;
        const DeviceBuffer workspace = poisoned_device_buffer(indexer_cuda_workspace_size(k));
        HostTensor out = poisoned_topk_output(rows, k, k + 3);
        DeviceTensor device_out = to_device(out);
        FI_ASSERT_OK(indexer_decode(device_out.view, device.q.view(), device.cache.cache,
                                    device.weights.view, device.context_lens.view,
                                    device.block_table.view, k, TopKOptions{true}, indexer_options,
                                    with_workspace(workspace)));
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        to_host(out, device_out);
        EXPECT_TRUE(SameTopK(out, expected, k, true));
      }
    }
  }
}

// The source (select_candidate_blocks) and the consumer layer (indexer_decode with candidates)
// captured in one CUDA graph, replayed: the same bits as the direct calls.
TEST(IndexerConsumerCuda, SourceAndConsumerReplayInACudaGraph) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.batch = 16;
  config.next_n = 2;
  config.max_len = 20000;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged device(p);
  const int64_t rows = p.rows();
  const int64_t width = p.block_table.size(1) * config.page_size;
  const int k = 512, num_blocks = 256, block_size = 8;
  HostTensor ends(DType::kI32, {rows});
  for (int64_t r = 0; r < rows; ++r) ends.data<int32_t>()[r] = static_cast<int32_t>(p.ends[r]);
  DeviceTensor device_ends = to_device(ends);
  DeviceTensor logits = to_device(poisoned_logits(rows, width));
  DeviceTensor blocks = to_device(poisoned_topk_output(rows, num_blocks));
  const DeviceBuffer select_workspace = poisoned_device_buffer(
      select_candidate_blocks_cuda_workspace_size(rows, width, num_blocks, block_size));
  const DeviceBuffer indexer_workspace = poisoned_device_buffer(indexer_cuda_workspace_size(k));
  IndexerOptions consumer;
  consumer.candidates = CandidateInput{blocks.view, block_size, false};
  auto run = [&](DeviceTensor& out, cudaStream_t stream) -> Status {
    RunOptions on_stream;
    on_stream.cuda_stream = stream;
    if (Status s = paged_mqa_logits(logits.view, device.q.view(), device.cache.cache,
                                    device.weights.view, device.context_lens.view,
                                    device.block_table.view, LogitsOptions{false}, on_stream);
        !s.ok()) {
      return s;
    }
    if (Status s = select_candidate_blocks(blocks.view, logits.view,
                                           CandidateRows::decode(device_ends.view), num_blocks,
                                           block_size, with_workspace(select_workspace, stream));
        !s.ok()) {
      return s;
    }
    return indexer_decode(out.view, device.q.view(), device.cache.cache, device.weights.view,
                          device.context_lens.view, device.block_table.view, k, TopKOptions{},
                          consumer, with_workspace(indexer_workspace, stream));
  };
  HostTensor direct = poisoned_topk_output(rows, k);
  DeviceTensor direct_out = to_device(direct);
  FI_ASSERT_OK(run(direct_out, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(direct, direct_out);
  HostTensor replayed = poisoned_topk_output(rows, k);
  DeviceTensor replayed_out = to_device(replayed);
  CapturedGraph graph;
  FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) { return run(replayed_out, stream); }));
  ASSERT_EQ(graph.replay(3), cudaSuccess);
  to_host(replayed, replayed_out);
  EXPECT_EQ(std::memcmp(replayed.bytes(), direct.bytes(), direct.byte_size()), 0);
}

TEST(IndexerConsumerCuda, TheFusedPathRefusesCandidates) {
  SKIP_ON_A_GPU_WITHOUT_THE_KERNELS();
  FI_SEEDED_RNG(rng);
  PrefillProblem p = make_prefill_problem(rng, KFormat::kFP8, 8, 64, 32, 128);
  HostTensor cand(DType::kI32, {8, 4});
  HostTensor out(DType::kI32, {8, 16});
  IndexerOptions indexer_options;
  indexer_options.path = IndexerPath::kFused;
  indexer_options.candidates = CandidateInput{labelled_cuda(cand.view()), 8, false};
  EXPECT_TRUE(
      IsRejected(indexer_prefill(labelled_cuda(out.view()), labelled_cuda(p.q.view()),
                                 labelled_cuda(p.keys.view()), labelled_cuda(p.weights.view()),
                                 labelled_cuda(p.ks.view()), labelled_cuda(p.ke.view()), 16,
                                 TopKOptions{}, indexer_options),
                 StatusCode::kInvalidArgument, {"fused path", "candidates"}));
}

}  // namespace
}  // namespace fitest
