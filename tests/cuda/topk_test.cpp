// SPDX-License-Identifier: Apache-2.0
// GPU topk_per_row against the reference oracle: same set (best first when sorted, ascending
// index order when not), -1 padding, columns >= k untouched, bit-identical repeats, graph capture.
// Every test skips without a GPU.
//
// Each case draws fresh random data from a printed seed (FLASHINDEXER_TEST_SEED replays one),
// poisons the output with 0x7fffffff before every run, runs twice and compares the bits.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/topk/params.h"
#include "flashindexer/flashindexer.h"
#include "flashindexer/formats.h"
#include "reference/reference.h"
#include "support/cuda.h"
#include "topk_cases.h"

namespace topk_cases {
namespace {

TEST(TopKCuda, MatchesReferenceOnRandomNormalRows) {
  SKIP_WITHOUT_GPU();
  run_case({300, 40000, 2048});  // one CTA per row: sampled threshold + direct path
  run_case({300, 6000, 2048});   // direct path only
  run_case({2, 300000, 2048, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
}

TEST(TopKCuda, IsIndependentOfACommonOffset) {
  SKIP_WITHOUT_GPU();
  run_case({300, 40000, 2048, Dist::kOffset100});
  run_case({16, 131072, 2048, Dist::kOffset100, false, false, Form::kDecode});
}

TEST(TopKCuda, SupportsEveryKFromOneTo4096) {
  SKIP_WITHOUT_GPU();
  for (int k : {1, 512, 777, 1024, 2048, 4096}) run_case({280, 12000, k});
  for (int k : {1, 777, 4096}) run_case({4, 70000, k, Dist::kNormal, false, false, Form::kDecode});
}

TEST(TopKCuda, SortedOutputIsTheCanonicalOrder) {
  SKIP_WITHOUT_GPU();
  for (int k : {1, 512, 777, 2048, 4096}) run_case({280, 20000, k, Dist::kNormal, false, true});
  run_case({8, 100000, 2048, Dist::kNormal, false, true, Form::kDecode});
  run_case({280, 20000, 512, Dist::kCoarseTies, false, true});
  run_case({270, 3000, 1024, Dist::kSpecials, false, true});
  // Every sort width: short rows hold 0..k + 1 keys (1 to 8 keys per thread in the sort).
  run_case({300, 5000, 4096, Dist::kNormal, false, true, Form::kPrefill, Lengths::kShort});
  run_case({3, 131072, 4096, Dist::kNormal, false, true, Form::kDecode, Lengths::kFull});
  // Cluster rows of 8 CTAs (each sorts its keys and places them), of fewer (CTA 0 sorts the
  // row) and of 1 CTA; fine ties in both sorts.
  run_case({1, 131072, 2048, Dist::kNormal, false, true, Form::kDecode, Lengths::kFull});
  run_case({30, 90000, 2048, Dist::kNormal, false, true, Form::kDecode});
  run_case({100, 40000, 1024, Dist::kOffset100, false, true, Form::kDecode});
  for (int rows : {12, 20}) {
    Case c{rows, 131072, 2048, Dist::kFineTies, true, true, Form::kDecode, Lengths::kFull};
    c.out_pad = 3;
    run_case(c);
  }
}

TEST(TopKCuda, AllEqualRowsTakeTheSmallestIndices) {
  SKIP_WITHOUT_GPU();
  run_case({270, 20000, 512, Dist::kAllEqual});
  run_case({270, 5000, 1024, Dist::kAllEqual});
  run_case({3, 100000, 2048, Dist::kAllEqual, false, false, Form::kDecode});
}

TEST(TopKCuda, TiesAtTheKthValueBreakTowardSmallerIndex) {
  SKIP_WITHOUT_GPU();
  run_case({270, 50000, 2048, Dist::kCoarseTies});
  run_case({270, 50000, 2048, Dist::kCoarseTies, true});
  run_case({6, 200000, 1024, Dist::kCoarseTies, false, false, Form::kDecode});
}

TEST(TopKCuda, NanRanksBelowMinusInfAndSignedZerosAreEqual) {
  SKIP_WITHOUT_GPU();
  run_case({280, 30000, 2048, Dist::kSpecials});
  run_case({280, 3000, 2048, Dist::kSpecials});
  run_case({280, 30000, 512, Dist::kSpecials, true});
  run_case({7, 60000, 2048, Dist::kSpecials, false, false, Form::kDecode});
}

// Scores packed into a few adjacent floats: the histogram select narrows over several rounds
// (score bits, then index bits), in shared memory (direct path), after a sampled threshold, and
// in the split merge.
TEST(TopKCuda, NarrowScoreRangesAreResolvedExactly) {
  SKIP_WITHOUT_GPU();
  run_case({280, 6000, 2048, Dist::kNarrow});
  run_case({280, 60000, 1024, Dist::kNarrow});
  run_case({4, 200000, 2048, Dist::kNarrow, false, true, Form::kDecode});
}

// Few rows of long rows: clusters of 1 to 8 CTAs per row (k <= 2048), and segments + merge with
// 2 to 4 splits (k > 2048).
TEST(TopKCuda, SplitRowsMatchTheReference) {
  SKIP_WITHOUT_GPU();
  run_case({1, 131072, 512, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
  run_case({64, 131072, 2048, Dist::kNormal, false, false, Form::kDecode});
  run_case({128, 131072, 2048, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
  run_case({33, 65536, 1024, Dist::kOffset100, false, true, Form::kDecode});
  run_case({1, 131072, 3000, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
  run_case({100, 131072, 4096, Dist::kNormal, false, true, Form::kDecode, Lengths::kFull});
}

// White-box, the cluster kernel's ways to the cutoff: a boundary bin of a few keys resolved by
// every CTA (normal rows above), a boundary bin taken whole (a gap below the k-th key), and one
// of hundreds of tied keys, which CTA 0 resolves after gathering every CTA's survivors.
TEST(TopKCuda, ClusterBoundaryBinsOfEveryKind) {
  SKIP_WITHOUT_GPU();
  for (const bool sorted : {false, true}) {
    run_case({1, 131072, 2048, Dist::kGapAboveK, false, sorted, Form::kDecode, Lengths::kFull});
    run_case({64, 131072, 2048, Dist::kGapAboveK, false, sorted, Form::kDecode, Lengths::kFull});
    run_case({1, 131072, 2048, Dist::kFineTies, false, sorted, Form::kDecode, Lengths::kFull});
    run_case({20, 131072, 1024, Dist::kFineTies, false, sorted, Form::kDecode, Lengths::kFull});
  }
  run_case({3, 300000, 512, Dist::kGapAboveK, true, false, Form::kDecode, Lengths::kFull});
}

// White-box: rows of 131072 keys are sampled in groups of 4 keys every 256 (kSampleStride), and
// here the 4 keys of every 128 are high, so the sample overestimates the k-th score and
// far fewer than k keys pass the threshold: the exact fallbacks must run (one CTA per row, CTA 0
// of a row's cluster, and the merge of a gated split row at k > kClusterMaxK).
TEST(TopKCuda, ASampleThatOverestimatesTheThresholdFallsBackExactly) {
  SKIP_WITHOUT_GPU();
  run_case({140, 131072, 2048, Dist::kSampleTrap, false, false, Form::kDecode, Lengths::kFull});
  run_case({1, 131072, 2048, Dist::kSampleTrap, false, true, Form::kDecode, Lengths::kFull});
  run_case({3, 131072, 512, Dist::kSampleTrap, true, false, Form::kDecode, Lengths::kFull});
  run_case({3, 131072, 4096, Dist::kSampleTrap, false, false, Form::kDecode, Lengths::kFull});
  // Rows of 1M keys (their 4096 sample groups also fall on the high columns): the fallback's
  // answer is put in index order through a bitmap of the row in two 512K-key windows, by CTA 0
  // of a cluster (1 row) and by the segment kernel (133 rows; every 32nd sees all keys).
  run_case({1, 1 << 20, 2048, Dist::kSampleTrap, false, false, Form::kDecode, Lengths::kFull});
  run_case({133, 1 << 20, 2048, Dist::kSampleTrap, false, false, Form::kDecode, Lengths::kFewLong});
}

TEST(TopKCuda, ShortAndEmptyRowsArePaddedWithMinusOne) {
  SKIP_WITHOUT_GPU();
  run_case({300, 5000, 2048, Dist::kNormal, false, false, Form::kPrefill, Lengths::kShort});
  run_case({300, 5000, 2048, Dist::kNormal, false, true, Form::kPrefill, Lengths::kShort});
  run_case({5, 5000, 777, Dist::kNormal, false, false, Form::kDecode, Lengths::kShort});
}

TEST(TopKCuda, AdversarialAscendingRows) {
  SKIP_WITHOUT_GPU();
  run_case({270, 60000, 2048, Dist::kAscending});
  run_case({2, 500000, 2048, Dist::kAscending, false, false, Form::kDecode, Lengths::kFull});
}

TEST(TopKCuda, LongRowsOfOneMillionKeys) {
  SKIP_WITHOUT_GPU();
  run_case({3, 1 << 20, 2048, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
  run_case({2, 1 << 20, 512, Dist::kOffset100, false, false, Form::kPrefill});
  run_case({2, 1 << 20, 4096, Dist::kNormal, true, false, Form::kDecode, Lengths::kFull});
}

// White-box: long unsorted rows on every path. One CTA per row (133 rows), clusters (67 rows;
// CTA 0's gather after fine ties) place their survivors in index order straight from their
// slices; the merge (k > 2048), whose candidates are not in index order, marks them in a bitmap
// of the row over its selection's space, written in windows (write_marked_in_index_order): at
// k = 4096, 1.1M keys take five windows of 256K keys.
TEST(TopKCuda, UnsortedRowsLongerThanOneBitmapWindow) {
  SKIP_WITHOUT_GPU();
  run_case({133, 530000, 1024, Dist::kNormal, false, false, Form::kDecode, Lengths::kFewLong});
  run_case({67, 530000, 2048, Dist::kNormal, false, false, Form::kDecode, Lengths::kFewLong});
  run_case({67, 530000, 2048, Dist::kFineTies, false, false, Form::kDecode, Lengths::kFewLong});
  run_case({2, 1100000, 4096, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
}

TEST(TopKCuda, OneRowAndManyShortRows) {
  SKIP_WITHOUT_GPU();
  run_case({1, 131072, 2048, Dist::kNormal, false, false, Form::kDecode, Lengths::kFull});
  run_case({1, 131072, 2048, Dist::kNormal, false, true, Form::kPrefill});
  run_case({65536, 300, 64});
  run_case({65536, 64, 1, Dist::kSpecials});
  run_case({65536, 200, 128, Dist::kNormal, true});
}

TEST(TopKCuda, Bf16Logits) {
  SKIP_WITHOUT_GPU();
  run_case({300, 30000, 2048, Dist::kNormal, true});
  run_case({16, 100000, 2048, Dist::kNormal, true, false, Form::kDecode});
  run_case({300, 30000, 1024, Dist::kOffset100, true, true});
}

TEST(TopKCuda, HonoursInputAndOutputRowStrides) {
  SKIP_WITHOUT_GPU();
  Case c{280, 30000, 2048};
  c.row_pad = 13;  // rows start at every alignment
  c.out_pad = 5;
  run_case(c);
  c.bf16 = true;
  c.row_pad = 3;
  run_case(c);
  Case d{9, 90001, 1024, Dist::kNormal, false, false, Form::kDecode};
  d.row_pad = 7;
  d.out_pad = 3;
  run_case(d);
}

TEST(TopKCuda, DecodeFormsWithNextN) {
  SKIP_WITHOUT_GPU();
  run_case({16, 40000, 2048, Dist::kNormal, false, false, Form::kDecodeNextN});
  run_case({16, 40000, 2048, Dist::kNormal, false, false, Form::kDecode2D});
  Case c{300, 20000, 512, Dist::kNormal, false, false, Form::kDecodeNextN};
  c.next_n = 3;
  run_case(c);
}

// One row's answer, computed with `rows` rows in the batch (the row at `at`, the others fresh
// N(0, 1) rows) in the decode form with full lengths: rows decide how the row is split (8-CTA
// cluster alone, 2 CTAs at 64 rows, one CTA at 300; segments + merge for k > 2048).
std::vector<int32_t> answer_in_batch(const std::vector<float>& row, int64_t rows, int64_t at, int k,
                                     bool sorted, uint64_t seed) {
  const auto width = static_cast<int64_t>(row.size());
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(static_cast<size_t>(rows * width));
  for (float& x : scores) x = normal(engine);
  std::copy(row.begin(), row.end(), scores.begin() + at * width);
  const std::vector<int32_t> lengths(static_cast<size_t>(rows), static_cast<int32_t>(width));
  DeviceBuffer logits_buffer(scores.size() * 4), out_buffer(static_cast<size_t>(rows * k) * 4),
      lengths_buffer(lengths.size() * 4);
  const size_t workspace_bytes = topk_per_row_cuda_workspace_size(rows, width, k);
  DeviceBuffer workspace(workspace_bytes);
  EXPECT_EQ(
      cudaMemcpy(logits_buffer.get(), scores.data(), logits_buffer.bytes(), cudaMemcpyHostToDevice),
      cudaSuccess);
  EXPECT_EQ(cudaMemcpy(lengths_buffer.get(), lengths.data(), lengths_buffer.bytes(),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  RunOptions options;
  options.workspace = workspace.get();
  options.workspace_bytes = workspace_bytes;
  TopKOptions topk_options;
  topk_options.sorted = sorted;
  const Status status = topk_per_row(
      TensorView::contiguous(out_buffer.get(), DType::kI32, {rows, k}, Device::kCUDA),
      TensorView::contiguous(logits_buffer.get(), DType::kF32, {rows, width}, Device::kCUDA),
      RowRanges::decode(
          TensorView::contiguous(lengths_buffer.get(), DType::kI32, {rows}, Device::kCUDA)),
      k, topk_options, options);
  EXPECT_TRUE(status.ok()) << status.message();
  std::vector<int32_t> got(static_cast<size_t>(rows * k));
  EXPECT_EQ(cudaMemcpy(got.data(), out_buffer.get(), out_buffer.bytes(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return {got.begin() + at * k, got.begin() + (at + 1) * k};
}

// The same row in batches of 1, 64 and 300 rows goes through differently split kernels (a cluster
// of 8 CTAs, 2 CTAs, one CTA; at k = 3000 segments and a merge): the answer must be the same bits,
// sorted (best first) or not (ascending index order).
TEST(TopKCuda, BatchCompositionDoesNotChangeTheAnswer) {
  SKIP_WITHOUT_GPU();
  const uint64_t seed = fitest::test_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(131072);
  for (float& x : row) x = normal(engine);
  for (const int k : {2048, 3000}) {
    for (const bool sorted : {true, false}) {
      const std::vector<int32_t> alone = answer_in_batch(row, 1, 0, k, sorted, seed + 1);
      for (const auto& [rows, at] : {std::pair<int64_t, int64_t>{64, 37}, {300, 299}}) {
        const std::vector<int32_t> batched = answer_in_batch(row, rows, at, k, sorted, seed + 2);
        EXPECT_TRUE(batched == alone)
            << "k=" << k << (sorted ? " sorted" : " unsorted") << ": the answer differs at " << rows
            << " rows from the row alone";
      }
    }
  }
}

TEST(TopKCuda, RefusesAMissingWorkspaceWhenRowsAreSplit) {
  SKIP_WITHOUT_GPU();
  const int64_t rows = 4;
  const int64_t width = 131072;
  const int k = 4096;  // > kClusterMaxK: segments + merge
  ASSERT_GT(topk_per_row_cuda_workspace_size(rows, width, k), 0u);
  DeviceBuffer logits_buffer(rows * width * 4), out_buffer(rows * k * 4), lengths(rows * 4);
  const Status status = topk_per_row(
      TensorView::contiguous(out_buffer.get(), DType::kI32, {rows, k}, Device::kCUDA),
      TensorView::contiguous(logits_buffer.get(), DType::kF32, {rows, width}, Device::kCUDA),
      RowRanges::decode(TensorView::contiguous(lengths.get(), DType::kI32, {rows}, Device::kCUDA)),
      k);
  EXPECT_EQ(status.code(), StatusCode::kWorkspaceTooSmall);
  EXPECT_NE(status.message().find("topk_per_row_cuda_workspace_size"), std::string::npos)
      << status.message();
}

// Captured once, replayed with new scores and new lengths: the graph reads both on the device.
TEST(TopKCuda, GraphCaptureReplaysWithNewData) {
  SKIP_WITHOUT_GPU();
  for (const int64_t rows : {int64_t{8}, int64_t{300}}) {
    const uint64_t seed = fitest::test_seed();
    const int64_t width = 50000;
    const int k = 2048;
    Case c{rows, width, k, Dist::kNormal, false, false, Form::kDecode};
    SCOPED_TRACE(describe(c) + " seed=" + std::to_string(seed));
    DeviceBuffer logits_buffer(rows * width * 4), out_buffer(rows * k * 4),
        lengths_buffer(rows * 4);
    const size_t workspace_bytes = topk_per_row_cuda_workspace_size(rows, width, k);
    DeviceBuffer workspace(workspace_bytes);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    RunOptions options;
    options.cuda_stream = stream;
    options.workspace = workspace.get();
    options.workspace_bytes = workspace_bytes;
    const TensorView out =
        TensorView::contiguous(out_buffer.get(), DType::kI32, {rows, k}, Device::kCUDA);
    const TensorView logits =
        TensorView::contiguous(logits_buffer.get(), DType::kF32, {rows, width}, Device::kCUDA);
    const RowRanges ranges = RowRanges::decode(
        TensorView::contiguous(lengths_buffer.get(), DType::kI32, {rows}, Device::kCUDA));
    cudaGraph_t graph;
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const Status status = topk_per_row(out, logits, ranges, k, {}, options);
    ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    ASSERT_TRUE(status.ok()) << status.message();
    cudaGraphExec_t exec;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int replay = 0; replay < 3; ++replay) {
      const Inputs in = make_inputs(c, seed + replay);
      ASSERT_EQ(cudaMemcpy(logits_buffer.get(), in.scores.data(), logits_buffer.bytes(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cudaMemcpy(lengths_buffer.get(), in.lengths.data(), lengths_buffer.bytes(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      std::vector<int32_t> got(static_cast<size_t>(rows * k), kPoison);
      ASSERT_EQ(
          cudaMemcpy(out_buffer.get(), got.data(), out_buffer.bytes(), cudaMemcpyHostToDevice),
          cudaSuccess);
      ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_EQ(
          cudaMemcpy(got.data(), out_buffer.get(), out_buffer.bytes(), cudaMemcpyDeviceToHost),
          cudaSuccess);
      expect_matches(c, got, k, reference_answer(c, in), seed + replay);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  }
}

}  // namespace
}  // namespace topk_cases
