// SPDX-License-Identifier: Apache-2.0
// A DeepSeek-V4.1 consumer step's sparse rows built once (build_sparse_consumer_rows_prefill /
// _decode) and handed to every consumer layer's call (CandidateInput::sparse_rows): each layer
// must return exactly what its own call without them returns (the sparse path building its rows,
// itself equal to the dense consumer bit for bit: sparse_consumer_test.cpp). Two layers a step
// (their own queries and weights; prefill also its own keys), poisoned buffers, many batches,
// both decode length forms and next_n 1..4, a CUDA graph holding the build and two layers, and
// the refusals: a buffer too small, the masking form, a CPU call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "indexer_cases.h"

namespace fitest {
namespace {

// Candidates in or past the rows' blocks, with repeats and -1 (the sparse rows sort, dedup and
// drop them).
HostTensor step_candidates(Rng& rng, int64_t rows, int num_blocks, int64_t row_blocks) {
  HostTensor cand(DType::kI32, {rows, num_blocks});
  for (int64_t i = 0; i < rows * num_blocks; ++i) {
    const double u = rng.uniform(0.0, 1.0);
    int64_t value = rng.uniform_int(0, std::max<int64_t>(row_blocks - 1, 0));
    if (u < 0.1) value = -1;
    if (u > 0.95) value = row_blocks + rng.uniform_int(0, 50);
    cand.data<int32_t>()[i] = static_cast<int32_t>(value);
  }
  return cand;
}

DeviceBuffer poisoned_rows_buffer(size_t bytes, TensorView* view) {
  DeviceBuffer buffer = poisoned_device_buffer(bytes);
  *view = TensorView::contiguous(buffer.get(), DType::kU8, {static_cast<int64_t>(bytes)},
                                 Device::kCUDA);
  return buffer;
}

// One consumer layer's call: `rows` (undefined: none) are the step's sparse rows.
HostTensor prefill_layer(const DevicePrefill& layer, const CandidateInput& base,
                         const TensorView& rows, int64_t row_count, int k, size_t workspace_bytes,
                         Status* status_out = nullptr) {
  IndexerOptions indexer_options;
  indexer_options.path = IndexerPath::kSparse;
  indexer_options.candidates = base;
  indexer_options.candidates.sparse_rows = rows;
  const DeviceBuffer workspace = poisoned_device_buffer(workspace_bytes);
  HostTensor out = poisoned_topk_output(row_count, k, k + 2);
  DeviceTensor device_out = to_device(out);
  const Status status = indexer_prefill(
      device_out.view, layer.q.view(), layer.keys.view(), layer.weights.view, layer.ks.view,
      layer.ke.view, k, TopKOptions{true}, indexer_options, with_workspace(workspace));
  if (status_out != nullptr) {
    *status_out = status;
  } else {
    EXPECT_TRUE(status.ok()) << status_text(status);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

TEST(SparseStepRowsCuda, PrefillLayersEqualTheirOwnCalls) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int block_size : {8, 16, 32}) {
    const int64_t rows = rng.uniform_int(10, 150);
    const int64_t keys = rng.uniform_int(200, 30000);
    const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{4, 128, 2048}));
    const int k = static_cast<int>(rng.pick(std::vector<int64_t>{1, 100, 512}));
    SCOPED_TRACE(::testing::Message() << "cb=" << block_size << " rows=" << rows << " keys=" << keys
                                      << " C=" << num_blocks << " k=" << k);
    // Two layers of one step: the same rows and candidates, their own queries, weights and keys.
    PrefillProblem first = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 32, 128);
    PrefillProblem second = make_prefill_problem(rng, KFormat::kFP8, rows, keys, 32, 128);
    std::memcpy(second.ks.bytes(), first.ks.bytes(), first.ks.byte_size());
    std::memcpy(second.ke.bytes(), first.ke.bytes(), first.ke.byte_size());
    const DevicePrefill layers[2] = {DevicePrefill(first), DevicePrefill(second)};
    DeviceTensor cand =
        to_device(step_candidates(rng, rows, num_blocks, (keys + block_size - 1) / block_size));
    const CandidateInput input{cand.view, block_size, false};
    TensorView rows_view;
    const DeviceBuffer rows_buffer = poisoned_rows_buffer(
        sparse_consumer_rows_size(rows, num_blocks, block_size) + 3, &rows_view);
    FI_ASSERT_OK(build_sparse_consumer_rows_prefill(rows_view, input, layers[0].ks.view,
                                                    layers[0].ke.view, keys));
    for (const DevicePrefill& layer : layers) {
      const HostTensor own =
          prefill_layer(layer, input, {}, rows, k, indexer_cuda_workspace_size(k));
      const HostTensor shared =
          prefill_layer(layer, input, rows_view, rows, k, indexer_cuda_workspace_size(k));
      EXPECT_EQ(std::memcmp(shared.bytes(), own.bytes(), own.byte_size()), 0);
      // A workspace of a few rows: many batches, each reading its rows of the step's.
      const size_t few = flashindexer::cuda::topk_per_row_workspace_bound(k) + 16 * 1024 +
                         5 * (int64_t{num_blocks} * block_size + 64) * 4;
      const HostTensor batched = prefill_layer(layer, input, rows_view, rows, k, few);
      EXPECT_EQ(std::memcmp(batched.bytes(), own.bytes(), own.byte_size()), 0);
    }
    // Refused: a buffer a byte short, and the masking form.
    Status status;
    TensorView short_view = rows_view;
    short_view.shape[0] =
        static_cast<int64_t>(sparse_consumer_rows_size(rows, num_blocks, block_size)) - 1;
    prefill_layer(layers[0], input, short_view, rows, k, indexer_cuda_workspace_size(k), &status);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("candidates.sparse_rows"), std::string::npos)
        << status_text(status);
    CandidateInput masking = input;
    masking.vllm_compatible = true;
    EXPECT_EQ(build_sparse_consumer_rows_prefill(rows_view, masking, layers[0].ks.view,
                                                 layers[0].ke.view, keys)
                  .code(),
              StatusCode::kInvalidArgument);
  }
}

HostTensor decode_layer(const DevicePaged& layer, const DeviceOperand& q,
                        const DeviceTensor& weights, const CandidateInput& base,
                        const TensorView& rows, int64_t row_count, int k) {
  IndexerOptions indexer_options;
  indexer_options.path = IndexerPath::kSparse;
  indexer_options.candidates = base;
  indexer_options.candidates.sparse_rows = rows;
  const DeviceBuffer workspace = poisoned_device_buffer(indexer_cuda_workspace_size(k));
  HostTensor out = poisoned_topk_output(row_count, k, k + 1);
  DeviceTensor device_out = to_device(out);
  EXPECT_TRUE(indexer_decode(device_out.view, q.view(), layer.cache.cache, weights.view,
                             layer.context_lens.view, layer.block_table.view, k, TopKOptions{true},
                             indexer_options, with_workspace(workspace))
                  .ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(out, device_out);
  return out;
}

TEST(SparseStepRowsCuda, DecodeLayersEqualTheirOwnCalls) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (int next_n = 1; next_n <= 4; ++next_n) {
    DecodeConfig config;
    config.batch = static_cast<int>(rng.uniform_int(1, 48));
    config.next_n = next_n;
    config.two_dim_lens = rng.bernoulli(0.5);
    config.page_size = static_cast<int>(rng.pick(std::vector<int64_t>{32, 64, 128}));
    config.max_len = rng.uniform_int(1, 40000);
    const int block_size = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16, 32}));
    const int num_blocks = static_cast<int>(rng.pick(std::vector<int64_t>{8, 512, 2048}));
    const int k = static_cast<int>(rng.pick(std::vector<int64_t>{16, 512}));
    SCOPED_TRACE(describe(config) + " cb=" + std::to_string(block_size) +
                 " C=" + std::to_string(num_blocks) + " k=" + std::to_string(k));
    DecodeProblem p = make_decode_problem(rng, config);
    const DevicePaged layer(p);
    const int64_t rows = p.rows();
    const int64_t width = p.block_table.size(1) * config.page_size;
    DeviceTensor cand =
        to_device(step_candidates(rng, rows, num_blocks, (width + block_size - 1) / block_size));
    const CandidateInput input{cand.view, block_size, false};
    TensorView rows_view;
    const DeviceBuffer rows_buffer =
        poisoned_rows_buffer(sparse_consumer_rows_size(rows, num_blocks, block_size), &rows_view);
    FI_ASSERT_OK(build_sparse_consumer_rows_decode(rows_view, input, layer.context_lens.view,
                                                   layer.block_table.view, next_n,
                                                   layer.cache.cache));
    // The second layer's own queries and weights over the same cache layout.
    const DeviceOperand second_q =
        to_device(make_query(rng, KFormat::kFP8, {config.batch, next_n, config.heads}, 128));
    const DeviceTensor second_weights = to_device(make_weights(rng, rows, config.heads));
    for (int l = 0; l < 2; ++l) {
      const DeviceOperand& q = l == 0 ? layer.q : second_q;
      const DeviceTensor& weights = l == 0 ? layer.weights : second_weights;
      const HostTensor own = decode_layer(layer, q, weights, input, {}, rows, k);
      const HostTensor shared = decode_layer(layer, q, weights, input, rows_view, rows, k);
      EXPECT_EQ(std::memcmp(shared.bytes(), own.bytes(), own.byte_size()), 0) << "layer " << l;
    }
  }
}

// A decode step in a CUDA graph: the rows built once, then two layers reading them; replayed
// after new queries are copied in, it gives the direct calls' answers.
TEST(SparseStepRowsCuda, DecodeStepReplaysInACudaGraph) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  DecodeConfig config;
  config.batch = 8;
  config.next_n = 2;
  config.max_len = 30000;
  DecodeProblem p = make_decode_problem(rng, config);
  const DevicePaged layer(p);
  const int64_t rows = p.rows();
  const int64_t width = p.block_table.size(1) * config.page_size;
  const int k = 256;
  DeviceTensor cand = to_device(step_candidates(rng, rows, 1024, (width + 7) / 8));
  const CandidateInput input{cand.view, 8, false};
  TensorView rows_view;
  const DeviceBuffer rows_buffer =
      poisoned_rows_buffer(sparse_consumer_rows_size(rows, 1024, 8), &rows_view);
  const DeviceBuffer workspace = poisoned_device_buffer(indexer_cuda_workspace_size(k));
  // Rows a column apart, as decode_layer's (the memcmp compares the gaps too).
  DeviceTensor outs[2] = {to_device(poisoned_topk_output(rows, k, k + 1)),
                          to_device(poisoned_topk_output(rows, k, k + 1))};
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  RunOptions run = with_workspace(workspace);
  run.cuda_stream = stream;
  IndexerOptions indexer_options;
  indexer_options.path = IndexerPath::kSparse;
  indexer_options.candidates = input;
  indexer_options.candidates.sparse_rows = rows_view;
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  FI_ASSERT_OK(build_sparse_consumer_rows_decode(rows_view, input, layer.context_lens.view,
                                                 layer.block_table.view, config.next_n,
                                                 layer.cache.cache, run));
  for (DeviceTensor& out : outs) {
    FI_ASSERT_OK(indexer_decode(out.view, layer.q.view(), layer.cache.cache, layer.weights.view,
                                layer.context_lens.view, layer.block_table.view, k,
                                TopKOptions{true}, indexer_options, run));
  }
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    // New queries in the captured buffer before each replay.
    const HostTensor fresh =
        make_query(rng, KFormat::kFP8, {config.batch, 2, config.heads}, 128).values;
    ASSERT_EQ(cudaMemcpy(layer.q.values.view.data, fresh.bytes(), fresh.byte_size(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const HostTensor want =
        decode_layer(layer, layer.q, layer.weights, input, TensorView{}, rows, k);
    for (const DeviceTensor& out : outs) {
      HostTensor got = poisoned_topk_output(rows, k, k + 1);
      to_host(got, out);
      EXPECT_EQ(std::memcmp(got.bytes(), want.bytes(), want.byte_size()), 0) << replay;
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace fitest
