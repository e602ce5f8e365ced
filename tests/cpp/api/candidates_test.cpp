// SPDX-License-Identifier: Apache-2.0
// The candidate ops on CPU tensors (candidates.h) against the reference written from spec §8:
// the source's block selection, vLLM's mask, the dense consumer (exact and vLLM-compatible), the
// sparse metadata and remap, on random and adversarial rows, and the errors for bad input.
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpp/api/candidates_cases.h"

namespace fitest {
namespace {

const std::vector<Fill> kFills = {Fill::kRandom, Fill::kFewTies, Fill::kSpecial};

struct Shape {
  BoundsForm form;
  int64_t rows;
  int64_t width;
  int block_size;
  int num_blocks;
  int row_repeat;
};

// Rows shorter than one block, than C blocks, than k; both forms; row_repeat 1..4.
std::vector<Shape> shapes(Rng& rng) {
  std::vector<Shape> list = {
      {BoundsForm::kPrefill, 12, 5, 8, 4, 1},      // narrower than one block
      {BoundsForm::kPrefill, 16, 37, 8, 16, 1},    // fewer blocks than C
      {BoundsForm::kPrefill, 24, 1000, 8, 16, 1},  // many more blocks than C
      {BoundsForm::kPrefill, 16, 700, 16, 32, 2}, {BoundsForm::kDecode, 16, 500, 8, 8, 1},
      {BoundsForm::kDecode, 24, 333, 8, 16, 3},   {BoundsForm::kDecode2D, 16, 260, 8, 64, 4},
      {BoundsForm::kDecode, 8, 200, 1, 64, 2},  // cb 1: blocks are keys
      {BoundsForm::kPrefill, 8, 0, 8, 4, 1},    // zero-width logits
  };
  list.push_back(
      {rng.pick(std::vector<BoundsForm>{BoundsForm::kPrefill, BoundsForm::kDecode}),
       rng.uniform_int(8, 40), rng.uniform_int(1, 3000), static_cast<int>(rng.uniform_int(1, 32)),
       static_cast<int>(rng.uniform_int(1, 300)), static_cast<int>(rng.uniform_int(1, 4))});
  return list;
}

void expect_same_i32(const HostTensor& got, const HostTensor& expected, int64_t cols,
                     const char* what) {
  for (int64_t r = 0; r < expected.size(0); ++r) {
    for (int64_t i = 0; i < cols; ++i) {
      ASSERT_EQ(got.at<int32_t>({r, i}), expected.at<int32_t>({r, i}))
          << what << " row " << r << " slot " << i;
    }
  }
}

void expect_same_bits(const HostTensor& got, const HostTensor& expected) {
  for (int64_t r = 0; r < expected.size(0); ++r) {
    for (int64_t s = 0; s < expected.size(1); ++s) {
      ASSERT_EQ(float_bits(got.at<float>({r, s})), float_bits(expected.at<float>({r, s})))
          << "row " << r << " column " << s;
    }
  }
}

// ----------------------------------------------------------------------------- source

TEST(CandidateBlocks, SelectionEqualsReferenceOnRandomAndAdversarialRows) {
  FI_SEEDED_RNG(rng);
  for (const Shape& s : shapes(rng)) {
    for (Fill fill : kFills) {
      CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size,
                                            s.num_blocks, s.row_repeat, fill);
      SCOPED_TRACE(c.describe() + " fill " + std::to_string(static_cast<int>(fill)));
      HostTensor expected(DType::kI32, {c.rows, c.num_blocks});
      reference::select_candidate_blocks(expected.view(), c.logits.view(), c.bounds(), c.num_blocks,
                                         c.block_size);
      for (int threads : {1, 3}) {
        HostTensor out = poisoned_topk_output(c.rows, c.num_blocks + 2);
        RunOptions options;
        options.cpu_threads = threads;
        FI_ASSERT_OK(select_candidate_blocks(out.view(), c.logits.view(), c.bounds(), c.num_blocks,
                                             c.block_size, options));
        expect_same_i32(out, expected, c.num_blocks, "select");
        EXPECT_TRUE(ColumnsBeyondKUntouched(out, c.num_blocks));
      }
    }
  }
}

// One row, cb 4, C 4: blocks {0: 1, 2, NaN | 1: 5 | 2: -inf x4 | 3: 7 | 4: 5 | 5: 3 (newest)}.
TEST(CandidateBlocks, NanRanksWithInfinityTiesGoToTheSmallerBlockAndTheNewestIsPinned) {
  const float nan = std::nanf("");
  std::vector<float> row = {1,     2, nan, 0, 5, 5, 5, 5, -kInf, -kInf, -kInf,
                            -kInf, 7, 0,   0, 0, 5, 1, 1, 1,     3,     3};
  HostTensor logits(DType::kF32, {1, static_cast<int64_t>(row.size())});
  std::copy(row.begin(), row.end(), logits.data<float>());
  HostTensor ke = i32_tensor({static_cast<int32_t>(row.size())});
  HostTensor out = poisoned_topk_output(1, 8);
  FI_ASSERT_OK(
      select_candidate_blocks(out.view(), logits.view(), CandidateRows::decode(ke.view()), 8, 4));
  // NaN block 0 and pinned block 5 score +inf (smaller id first), then 7 (block 3), the tie at 5
  // (blocks 1 and 4, smaller first); block 2 is -inf, so -1; then the unused slots.
  EXPECT_EQ(topk_row(out, 0, 8), (std::vector<int32_t>{0, 5, 3, 1, 4, -1, -1, -1}));
}

TEST(CandidateBlocks, BlockMaxReadsOnlyVisibleColumns) {
  // Row [ks=3, ke=9) of cb 4: blocks are columns 3-6 and 7-8; the +inf columns lie outside.
  std::vector<float> row = {kInf, kInf, kInf, 1, 2, 3, 4, 9, 8, kInf, kInf};
  HostTensor logits(DType::kF32, {1, static_cast<int64_t>(row.size())});
  std::copy(row.begin(), row.end(), logits.data<float>());
  HostTensor ks = i32_tensor({3});
  HostTensor ke = i32_tensor({9});
  HostTensor out = poisoned_topk_output(1, 3);
  FI_ASSERT_OK(select_candidate_blocks(out.view(), logits.view(),
                                       CandidateRows::prefill(ks.view(), ke.view()), 3, 4));
  EXPECT_EQ(topk_row(out, 0, 3), (std::vector<int32_t>{1, 0, -1}));
}

TEST(CandidateBlocks, ZeroWidthAndEmptyRowsGiveOnlyMinusOne) {
  HostTensor logits(DType::kF32, {2, 0});
  HostTensor ke = i32_tensor({0, 0});
  HostTensor out = poisoned_topk_output(2, 4);
  FI_ASSERT_OK(
      select_candidate_blocks(out.view(), logits.view(), CandidateRows::decode(ke.view()), 4, 8));
  for (int64_t r = 0; r < 2; ++r) EXPECT_EQ(topk_row(out, r, 4), std::vector<int32_t>(4, -1));
}

// ----------------------------------------------------------------------------- mask

TEST(CandidateMask, EqualsReferenceOnRandomAndAdversarialRows) {
  FI_SEEDED_RNG(rng);
  for (const Shape& s : shapes(rng)) {
    CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size, s.num_blocks,
                                          s.row_repeat, Fill::kSpecial, 0.3);
    SCOPED_TRACE(c.describe());
    HostTensor expected = copy_of(c.logits);
    reference::apply_candidate_mask(expected.view(), c.bounds(), c.candidates.view(), c.block_size);
    HostTensor got = copy_of(c.logits);
    FI_ASSERT_OK(apply_candidate_mask(got.view(), c.bounds(), c.candidates.view(), c.block_size));
    expect_same_bits(got, expected);
  }
}

TEST(CandidateMask, EdgeFlagKeepsTheLastColumnOnlyInsideTheRow) {
  // Width 10, cb 4. Row 0 [2, 10) names block 5 (start 2 + 20 >= 10): the edge flag keeps
  // column 9. Row 1 [0, 9) names the same: column 9 lies outside the row, nothing is kept.
  HostTensor logits(DType::kF32, {2, 10});
  for (int64_t i = 0; i < 20; ++i) logits.data<float>()[i] = static_cast<float>(i);
  HostTensor ks = i32_tensor({2, 0});
  HostTensor ke = i32_tensor({10, 9});
  HostTensor cand(DType::kI32, {2, 2});
  for (int32_t v : {0, 1, 2, 3}) cand.data<int32_t>()[v] = v % 2 == 0 ? 5 : -1;
  FI_ASSERT_OK(apply_candidate_mask(logits.view(), CandidateRows::prefill(ks.view(), ke.view()),
                                    cand.view(), 4));
  for (int64_t col = 0; col < 10; ++col) {
    EXPECT_EQ(logits.at<float>({0, col}), col == 9 ? 9.0f : -kInf) << "row 0 column " << col;
    EXPECT_EQ(logits.at<float>({1, col}), -kInf) << "row 1 column " << col;
  }
}

// ----------------------------------------------------------------------------- dense consumer

TEST(CandidateTopK, EqualsReferenceExactAndVllmCompatible) {
  FI_SEEDED_RNG(rng);
  for (const Shape& s : shapes(rng)) {
    for (Fill fill : kFills) {
      CandidateCase c = make_candidate_case(rng, s.form, s.rows, s.width, s.block_size,
                                            s.num_blocks, s.row_repeat, fill, 0.2);
      // k around the candidate positions: fewer than k (a -1 tail, or -inf fill) and more.
      const int k = static_cast<int>(std::min<int64_t>(
          kMaxTopK,
          rng.pick(std::vector<int64_t>{1, 7, std::max<int64_t>(1, c.num_blocks * c.block_size / 2),
                                        c.num_blocks * c.block_size + 5})));
      for (bool vllm : {false, true}) {
        for (bool sorted : {false, true}) {
          SCOPED_TRACE(c.describe() + " k=" + std::to_string(k) + (vllm ? " vllm" : " exact") +
                       (sorted ? " sorted" : " unsorted") + " fill " +
                       std::to_string(static_cast<int>(fill)));
          HostTensor expected_logits = copy_of(c.logits);
          HostTensor expected(DType::kI32, {c.rows, k});
          reference::candidate_topk_per_row(expected.view(), expected_logits.view(), c.bounds(),
                                            c.candidates.view(), c.block_size, k, vllm);
          HostTensor logits = copy_of(c.logits);
          HostTensor out = poisoned_topk_output(c.rows, k + 2);
          RunOptions options;
          options.cpu_threads = static_cast<int>(rng.uniform_int(1, 3));
          FI_ASSERT_OK(candidate_topk_per_row(out.view(), logits.view(), c.bounds(),
                                              c.candidates.view(), c.block_size, k,
                                              CandidateTopKOptions{sorted, vllm}, options));
          EXPECT_TRUE(SameTopK(out, expected, k, sorted));
          if (vllm) expect_same_bits(logits, expected_logits);
        }
      }
    }
  }
}

// vLLM's dense consumer restated from its description (spec §8.4): the mask, then the plain
// top-k of the row. The compatible option must be exactly that, and the exact consumer must
// differ only where the blocks hold fewer than k positions or the edge flag fires.
TEST(CandidateTopK, VllmCompatibleIsMaskThenTopKAndExactDiffersOnlyInTheTwoCorners) {
  FI_SEEDED_RNG(rng);
  CandidateCase c =
      make_candidate_case(rng, BoundsForm::kPrefill, 32, 600, 8, 4, 1, Fill::kRandom, 0.3);
  const int k = 40;  // 4 blocks of 8 hold 32 positions at most: fewer than k
  HostTensor masked = copy_of(c.logits);
  FI_ASSERT_OK(apply_candidate_mask(masked.view(), c.bounds(), c.candidates.view(), 8));
  HostTensor ke_clamped(DType::kI32, {c.rows});
  for (int64_t t = 0; t < c.rows; ++t) {
    ke_clamped.data<int32_t>()[t] =
        std::min<int32_t>(c.ke.data<int32_t>()[t], static_cast<int32_t>(c.width));
  }
  HostTensor restated = poisoned_topk_output(c.rows, k);
  FI_ASSERT_OK(topk_per_row(restated.view(), masked.view(),
                            RowRanges::prefill(c.ks.view(), ke_clamped.view()), k,
                            TopKOptions{true}));
  HostTensor compatible = poisoned_topk_output(c.rows, k);
  HostTensor logits = copy_of(c.logits);
  FI_ASSERT_OK(candidate_topk_per_row(compatible.view(), logits.view(), c.bounds(),
                                      c.candidates.view(), 8, k, CandidateTopKOptions{true, true}));
  expect_same_i32(compatible, restated, k, "vllm-compatible vs mask + topk_per_row");
  HostTensor exact = poisoned_topk_output(c.rows, k);
  FI_ASSERT_OK(candidate_topk_per_row(exact.view(), c.logits.view(), c.bounds(),
                                      c.candidates.view(), 8, k,
                                      CandidateTopKOptions{true, false}));
  for (int64_t t = 0; t < c.rows; ++t) {
    const int64_t ks = c.ks.data<int32_t>()[t];
    const int64_t ke = c.ke.data<int32_t>()[t];
    bool edge = false;  // the edge flag keeps the last column: the second corner
    for (int j = 0; j < 4; ++j) {
      const int64_t cand = c.candidates.at<int32_t>({t, j});
      edge |= cand >= 0 && ks + cand * 8 >= c.width && ks <= c.width - 1 && c.width - 1 < ke;
    }
    if (edge) continue;
    for (int i = 0; i < k; ++i) {
      const int32_t p = exact.at<int32_t>({t, i});
      if (p < 0) continue;
      // Every exact position lies in a named block, and the compatible answer starts the same.
      bool named = false;
      for (int j = 0; j < 4; ++j) named |= c.candidates.at<int32_t>({t, j}) == p / 8;
      EXPECT_TRUE(named) << "row " << t << " position " << p << " is outside its blocks";
      if (c.logits.at<float>({t, ks + p}) > -kInf) {
        EXPECT_EQ(compatible.at<int32_t>({t, i}), p) << "row " << t << " slot " << i;
      }
    }
  }
}

TEST(CandidateTopK, FewerPositionsThanKLeaveMinusOneInExactModeAndMaskedFillInVllmMode) {
  // One row of 40 keys, cb 8, candidates {1}: 8 positions; k = 12.
  HostTensor logits(DType::kF32, {1, 40});
  for (int64_t i = 0; i < 40; ++i) logits.data<float>()[i] = static_cast<float>(i % 7);
  HostTensor ke = i32_tensor({40});
  HostTensor cand(DType::kI32, {1, 2});
  cand.data<int32_t>()[0] = 1;
  cand.data<int32_t>()[1] = 1;  // a duplicate names nothing more
  HostTensor exact = poisoned_topk_output(1, 12);
  FI_ASSERT_OK(candidate_topk_per_row(exact.view(), logits.view(), CandidateRows::decode(ke.view()),
                                      cand.view(), 8, 12, CandidateTopKOptions{false, false}));
  EXPECT_EQ(topk_row(exact, 0, 12),
            (std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15, -1, -1, -1, -1}));
  HostTensor compatible = poisoned_topk_output(1, 12);
  FI_ASSERT_OK(candidate_topk_per_row(compatible.view(), logits.view(),
                                      CandidateRows::decode(ke.view()), cand.view(), 8, 12,
                                      CandidateTopKOptions{false, true}));
  // The 8 named positions, then the first 4 masked ones (-inf, smallest indices).
  EXPECT_EQ(topk_row(compatible, 0, 12),
            (std::vector<int32_t>{0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}));
}

// ----------------------------------------------------------------------------- sparse metadata

TEST(SparseIndices, EqualReferenceForRatioOneAndTwo) {
  FI_SEEDED_RNG(rng);
  for (int block_size : {8, 16, 32}) {
    for (int sparse_block : {8, 16}) {
      if (block_size % sparse_block != 0 || block_size / sparse_block > 2) continue;
      for (BoundsForm form : {BoundsForm::kPrefill, BoundsForm::kDecode}) {
        const int C = static_cast<int>(rng.pick(std::vector<int64_t>{1, 4, 32, 128}));
        CandidateCase c =
            make_candidate_case(rng, form, 24, rng.uniform_int(1, 4000), block_size, C,
                                static_cast<int>(rng.uniform_int(1, 3)), Fill::kRandom, 0.2);
        SCOPED_TRACE(c.describe() + " SBK=" + std::to_string(sparse_block));
        const int64_t S = int64_t{C} * (block_size / sparse_block);
        HostTensor expected(DType::kI32, {c.rows, S});
        HostTensor expected_end(DType::kI32, {c.rows});
        reference::candidate_blocks_to_sparse_indices(expected.view(), expected_end.view(),
                                                      c.candidates.view(), c.bounds(), block_size,
                                                      sparse_block);
        HostTensor got = poisoned_topk_output(c.rows, S);
        HostTensor end = poisoned_topk_output(c.rows, 1);
        const TensorView end_view =
            TensorView::contiguous(end.data<int32_t>(), DType::kI32, {c.rows});
        FI_ASSERT_OK(candidate_blocks_to_sparse_indices(got.view(), end_view, c.candidates.view(),
                                                        c.bounds(), block_size, sparse_block));
        expect_same_i32(got, expected, S, "sparse_indices");
        for (int64_t t = 0; t < c.rows; ++t) {
          EXPECT_EQ(end.data<int32_t>()[t], expected_end.data<int32_t>()[t]) << "end row " << t;
        }
      }
    }
  }
}

TEST(SparseIndices, FollowTheSeedConventionsOnAWorkedRow) {
  // ks = 13 (unaligned), ke = 13 + 45, cb 16, SBK 8 (ratio 2): candidates {2, -1, 0, 9}.
  // Sparse blocks kept (< ceil(45 / 8) = 6): 4, 5 from 2; 0, 1 from 0; 18, 19 dropped.
  HostTensor ks = i32_tensor({13});
  HostTensor ke = i32_tensor({58});
  HostTensor cand(DType::kI32, {1, 4});
  const int32_t values[] = {2, -1, 0, 9};
  std::copy(values, values + 4, cand.data<int32_t>());
  HostTensor sparse = poisoned_topk_output(1, 8);
  HostTensor end(DType::kI32, {1});
  FI_ASSERT_OK(candidate_blocks_to_sparse_indices(
      sparse.view(), end.view(), cand.view(), CandidateRows::prefill(ks.view(), ke.view()), 16, 8));
  // base = 13 / 8 = 1; padding repeats the last kept block.
  EXPECT_EQ(topk_row(sparse, 0, 8), (std::vector<int32_t>{1, 2, 5, 6, 6, 6, 6, 6}));
  // (4 - 1) * 8 + clamp(58 - (5 * 8 + 13), 1, 8) = 24 + 5.
  EXPECT_EQ(end.data<int32_t>()[0], 29);
  // Columns back to positions: column 9 lies in sparse block 1 (index 2 - base = 1): 8 + 1;
  // column 30 (block 3, index 6 - 1 = 5): 40 + 6; columns past S * SBK, and -1, become -1.
  HostTensor columns = i32_tensor({9, 30, -1, 64, 0});
  HostTensor columns2d(DType::kI32, {1, 5});
  std::copy(columns.data<int32_t>(), columns.data<int32_t>() + 5, columns2d.data<int32_t>());
  FI_ASSERT_OK(sparse_topk_remap(columns2d.view(), columns2d.view(), sparse.view(),
                                 CandidateRows::prefill(ks.view(), TensorView{}), 8));
  EXPECT_EQ(topk_row(columns2d, 0, 5), (std::vector<int32_t>{9, 46, -1, -1, 0}));
}

TEST(SparseRemap, EqualsReference) {
  FI_SEEDED_RNG(rng);
  for (int sparse_block : {8, 16}) {
    CandidateCase c = make_candidate_case(rng, BoundsForm::kPrefill, 16, 2000, sparse_block, 32, 2,
                                          Fill::kRandom, 0.2);
    HostTensor sparse(DType::kI32, {c.rows, 32});
    HostTensor end(DType::kI32, {c.rows});
    FI_ASSERT_OK(candidate_blocks_to_sparse_indices(sparse.view(), end.view(), c.candidates.view(),
                                                    c.bounds(), sparse_block, sparse_block));
    const int k = 50;
    HostTensor columns(DType::kI32, {c.rows, k});
    for (int64_t i = 0; i < c.rows * k; ++i) {
      columns.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(-3, 32 * sparse_block + 3));
    }
    HostTensor expected(DType::kI32, {c.rows, k});
    reference::sparse_topk_remap(expected.view(), columns.view(), sparse.view(), c.bounds(),
                                 sparse_block);
    HostTensor got = poisoned_topk_output(c.rows, k);
    FI_ASSERT_OK(
        sparse_topk_remap(got.view(), columns.view(), sparse.view(), c.bounds(), sparse_block));
    expect_same_i32(got, expected, k, "remap");
  }
}

// The sparse consumer's conventions give the dense consumer's answer: scoring only the sparse
// blocks' keys (here: copying their dense logits), top-k over [0, end), remap == the exact
// consumer, for candidates without duplicates (a source's candidates never repeat a block).
TEST(SparseRemap, SparseRouteEqualsTheExactDenseConsumer) {
  FI_SEEDED_RNG(rng);
  for (int block_size : {8, 16}) {
    for (BoundsForm form : {BoundsForm::kPrefill, BoundsForm::kDecode}) {
      const int C = 16;
      CandidateCase c = make_candidate_case(rng, form, 20, rng.uniform_int(50, 3000), block_size, C,
                                            1, Fill::kFewTies, 0.0);
      SCOPED_TRACE(c.describe());
      // Bounds inside the logits, and each block named once.
      for (int64_t r = 0; r < c.ke.size(0); ++r) {
        c.ke.data<int32_t>()[r] = std::min<int32_t>(c.ke.data<int32_t>()[r], c.width);
      }
      for (int64_t t = 0; t < c.rows; ++t) {
        for (int i = 0; i < C; ++i) {
          for (int j = 0; j < i; ++j) {
            if (c.candidates.at<int32_t>({t, j}) == c.candidates.at<int32_t>({t, i})) {
              c.candidates.at<int32_t>({t, i}) = -1;
            }
          }
        }
      }
      const int sparse_block = 8;
      const int64_t S = int64_t{C} * (block_size / sparse_block);
      HostTensor sparse(DType::kI32, {c.rows, S});
      HostTensor end(DType::kI32, {c.rows});
      FI_ASSERT_OK(candidate_blocks_to_sparse_indices(
          sparse.view(), end.view(), c.candidates.view(), c.bounds(), block_size, sparse_block));
      HostTensor sparse_logits(DType::kF32, {c.rows, S * sparse_block});
      for (int64_t t = 0; t < c.rows; ++t) {
        const int64_t ks = c.form == BoundsForm::kPrefill ? c.ks.data<int32_t>()[t] : 0;
        for (int64_t j = 0; j < S * sparse_block; ++j) {
          const int64_t key = int64_t{sparse.at<int32_t>({t, j / sparse_block})} * sparse_block +
                              ks % sparse_block + j % sparse_block;
          sparse_logits.at<float>({t, j}) = j < end.data<int32_t>()[t]
                                                ? c.logits.at<float>({t, key})
                                                : bits_float(kPoisonLogitBits);
        }
      }
      const int k = 20;
      HostTensor columns(DType::kI32, {c.rows, k});
      FI_ASSERT_OK(topk_per_row(columns.view(), sparse_logits.view(), RowRanges::decode(end.view()),
                                k, TopKOptions{true}));
      FI_ASSERT_OK(sparse_topk_remap(columns.view(), columns.view(), sparse.view(), c.bounds(),
                                     sparse_block));
      HostTensor dense(DType::kI32, {c.rows, k});
      FI_ASSERT_OK(candidate_topk_per_row(dense.view(), c.logits.view(), c.bounds(),
                                          c.candidates.view(), block_size, k,
                                          CandidateTopKOptions{true, false}));
      for (int64_t t = 0; t < c.rows; ++t) {
        EXPECT_EQ(topk_row(columns, t, k), topk_row(dense, t, k)) << "row " << t;
      }
    }
  }
}

// ----------------------------------------------------------------------------- bad input

TEST(CandidateArgs, RejectBadInputNamingTheArgument) {
  HostTensor logits(DType::kF32, {4, 64});
  HostTensor bf16_logits(DType::kBF16, {4, 64});
  HostTensor ke = i32_tensor({64, 64, 64, 64});
  HostTensor ks_bad = i32_tensor({5, 0, 0, 0});
  HostTensor ke_bad = i32_tensor({4, 64, 64, 64});
  HostTensor cand(DType::kI32, {4, 8});
  cand.fill<int32_t>(0);
  HostTensor cand_i64(DType::kI64, {4, 8});
  HostTensor cand_rows(DType::kI32, {3, 8});
  HostTensor out(DType::kI32, {4, 8});
  const CandidateRows rows = CandidateRows::decode(ke.view());
  EXPECT_TRUE(IsRejected(select_candidate_blocks(out.view(), logits.view(), rows, 5000, 8),
                         StatusCode::kInvalidArgument, {"num_blocks=5000", "4096"}));
  EXPECT_TRUE(IsRejected(select_candidate_blocks(out.view(), logits.view(), rows, 0, 8),
                         StatusCode::kInvalidArgument, {"num_blocks=0"}));
  EXPECT_TRUE(IsRejected(select_candidate_blocks(out.view(), logits.view(), rows, 16, 8),
                         StatusCode::kInvalidArgument, {"out", "16"}));
  EXPECT_TRUE(IsRejected(select_candidate_blocks(out.view(), logits.view(), rows, 8, 0),
                         StatusCode::kInvalidArgument, {"block_size=0"}));
  EXPECT_TRUE(IsRejected(select_candidate_blocks(out.view(), bf16_logits.view(), rows, 8, 8),
                         StatusCode::kInvalidArgument, {"logits", "bf16"}));
  EXPECT_TRUE(IsRejected(
      select_candidate_blocks(out.view(), logits.view(), CandidateRows::decode(ke.view(), 3), 8, 8),
      StatusCode::kInvalidArgument, {"row_repeat=3"}));
  EXPECT_TRUE(IsRejected(
      select_candidate_blocks(out.view(), logits.view(),
                              CandidateRows::prefill(ks_bad.view(), ke_bad.view()), 8, 8),
      StatusCode::kInvalidArgument, {"ks=5", "ke=4"}));
  EXPECT_TRUE(IsRejected(apply_candidate_mask(logits.view(), rows, cand_i64.view(), 8),
                         StatusCode::kInvalidArgument, {"candidates", "i64"}));
  EXPECT_TRUE(IsRejected(apply_candidate_mask(logits.view(), rows, cand_rows.view(), 8),
                         StatusCode::kInvalidArgument, {"candidates", "[3, 8]"}));
  EXPECT_TRUE(IsRejected(candidate_topk_per_row(out.view(), logits.view(), rows, cand.view(), 8, 9),
                         StatusCode::kInvalidArgument, {"out"}));
  HostTensor sparse(DType::kI32, {4, 8});
  HostTensor end(DType::kI32, {4});
  EXPECT_TRUE(IsRejected(
      candidate_blocks_to_sparse_indices(sparse.view(), end.view(), cand.view(), rows, 12, 8),
      StatusCode::kInvalidArgument, {"block_size=12", "not a multiple of the sparse block 8"}));
  EXPECT_TRUE(IsRejected(
      candidate_blocks_to_sparse_indices(sparse.view(), end.view(), cand.view(), rows, 32, 8),
      StatusCode::kInvalidArgument, {"block_size=32", "expected 1 or 2"}));
  EXPECT_TRUE(IsRejected(
      candidate_blocks_to_sparse_indices(sparse.view(), end.view(), cand.view(), rows, 8, 4),
      StatusCode::kInvalidArgument, {"sparse_block=4"}));
  HostTensor cand6(DType::kI32, {4, 6});
  HostTensor sparse6(DType::kI32, {4, 6});
  EXPECT_TRUE(IsRejected(
      candidate_blocks_to_sparse_indices(sparse6.view(), end.view(), cand6.view(), rows, 8, 8),
      StatusCode::kInvalidArgument, {"power of two"}));
  EXPECT_TRUE(IsRejected(
      candidate_blocks_to_sparse_indices(sparse6.view(), end.view(), cand.view(), rows, 16, 8),
      StatusCode::kInvalidArgument, {"sparse_indices", "16"}));
  HostTensor columns(DType::kI32, {4, 5});
  EXPECT_TRUE(IsRejected(sparse_topk_remap(out.view(), columns.view(), sparse.view(), rows, 8),
                         StatusCode::kInvalidArgument, {"out"}));
}

}  // namespace
}  // namespace fitest
