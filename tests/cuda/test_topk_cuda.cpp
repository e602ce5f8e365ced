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
#include "cuda_test_support.h"
#include "flashindexer/flashindexer.h"
#include "flashindexer/formats.h"
#include "reference/reference.h"

namespace {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

constexpr int32_t kPoison = 0x7fffffff;

using fitest::DeviceBuffer;

enum class Dist {
  kNormal,
  kOffset100,
  kAllEqual,
  kCoarseTies,
  kSpecials,
  kAscending,
  kNarrow,
  kSampleTrap,
  kFineTies,
  kGapAboveK
};
enum class Form { kPrefill, kDecode, kDecodeNextN, kDecode2D };
// kFewLong: every 32nd row sees all keys, the others at most k + 1.
enum class Lengths { kMixed, kFull, kShort, kFewLong };

struct Case {
  int64_t rows;
  int64_t width;
  int k;
  Dist dist = Dist::kNormal;
  bool bf16 = false;
  bool sorted = false;
  Form form = Form::kPrefill;
  Lengths lengths = Lengths::kMixed;
  int64_t row_pad = 0;  // logits row stride = width + row_pad
  int64_t out_pad = 0;  // output row stride = k + out_pad
  int next_n = 2;
};

std::string describe(const Case& c) {
  return "rows=" + std::to_string(c.rows) + " width=" + std::to_string(c.width) +
         " k=" + std::to_string(c.k) + " dist=" + std::to_string(static_cast<int>(c.dist)) +
         (c.bf16 ? " bf16" : " f32") + (c.sorted ? " sorted" : "") +
         " form=" + std::to_string(static_cast<int>(c.form)) +
         " row_pad=" + std::to_string(c.row_pad) + " out_pad=" + std::to_string(c.out_pad);
}

// Host-side inputs of one case.
struct Inputs {
  int64_t stride = 0;
  std::vector<float> scores;     // [rows, stride] (the fp32 values; bf16 cases hold bf16 values)
  std::vector<uint16_t> bf16;    // [rows, stride] when bf16
  std::vector<int32_t> ks, ke;   // prefill form
  std::vector<int32_t> lengths;  // decode forms
};

float draw(Dist dist, std::mt19937_64& engine, int64_t row, int64_t column, float row_base) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  switch (dist) {
    case Dist::kNormal:
      return normal(engine);
    case Dist::kOffset100:
      return 100.0f + normal(engine);
    case Dist::kAllEqual:
      return row_base;
    case Dist::kCoarseTies:
      return std::round(normal(engine) * 2.0f) / 2.0f;  // ~15 distinct values: huge tie classes
    case Dist::kSpecials: {
      const uint32_t pick = static_cast<uint32_t>(engine() % 100);
      if (row % 7 == 3) return std::numeric_limits<float>::quiet_NaN();  // an all-NaN row
      if (pick < 6) return std::numeric_limits<float>::quiet_NaN();
      if (pick < 8) return -std::numeric_limits<float>::quiet_NaN();
      if (pick < 10) return std::numeric_limits<float>::infinity();
      if (pick < 14) return -std::numeric_limits<float>::infinity();
      if (pick < 17) return 0.0f;
      if (pick < 20) return -0.0f;
      if (row % 7 == 5) return -std::numeric_limits<float>::infinity();  // fewer than k finite
      return normal(engine);
    }
    case Dist::kAscending:
      return static_cast<float>(column) * 0.5f + row_base;
    case Dist::kNarrow:  // 12 adjacent floats: every histogram round must fall back on indices
      return 1.0f + static_cast<float>(engine() % 12) * 0x1p-23f;
    case Dist::kSampleTrap:  // high exactly where the sampled threshold of a 128K row reads
      return (column % 128 < 4 ? 10.0f : 0.0f) + normal(engine);
    case Dist::kFineTies:  // ~130 distinct values: hundreds of copies of the k-th score
      return std::round(normal(engine) * 16.0f) / 16.0f;
    case Dist::kGapAboveK:  // N(0, 1); make_inputs lifts k random keys of the row by 10
      return normal(engine);
  }
  return 0.0f;
}

Inputs make_inputs(const Case& c, uint64_t seed) {
  std::mt19937_64 engine(seed);
  Inputs in;
  in.stride = c.width + c.row_pad;
  in.scores.assign(static_cast<size_t>(c.rows * in.stride), -12345.0f);
  for (int64_t r = 0; r < c.rows; ++r) {
    const float row_base = static_cast<float>(static_cast<int>(engine() % 64)) - 32.0f;
    for (int64_t s = 0; s < c.width; ++s) {
      float x = draw(c.dist, engine, r, s, row_base);
      if (c.bf16) x = bf16_to_float(float_to_bf16(x));
      in.scores[r * in.stride + s] = x;
    }
    if (c.dist == Dist::kGapAboveK) {
      // Exactly k keys far above the others: the k-th largest is the lowest of them.
      std::vector<int64_t> columns(static_cast<size_t>(c.width));
      for (int64_t s = 0; s < c.width; ++s) columns[s] = s;
      std::shuffle(columns.begin(), columns.end(), engine);
      for (int64_t j = 0; j < std::min<int64_t>(c.k, c.width); ++j) {
        float& x = in.scores[r * in.stride + columns[j]];
        x = c.bf16 ? bf16_to_float(float_to_bf16(x + 10.0f)) : x + 10.0f;
      }
    }
  }
  if (c.bf16) {
    in.bf16.resize(in.scores.size());
    for (size_t i = 0; i < in.scores.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &in.scores[i], sizeof bits);
      in.bf16[i] = static_cast<uint16_t>(bits >> 16);  // exact: values are bf16 already
    }
  }
  int64_t drawn = 0;
  auto draw_length = [&](int64_t max_length) -> int64_t {
    if (c.lengths == Lengths::kFull) return max_length;
    if (c.lengths == Lengths::kFewLong) {
      return drawn++ % 32 == 0 ? max_length : static_cast<int64_t>(engine() % (c.k + 2));
    }
    if (c.lengths == Lengths::kShort) return static_cast<int64_t>(engine() % (c.k + 2));
    const uint32_t pick = static_cast<uint32_t>(engine() % 20);
    if (pick == 0) return 0;
    if (pick == 1) return std::min<int64_t>(max_length, static_cast<int64_t>(engine() % (c.k + 1)));
    if (pick < 6) return static_cast<int64_t>(engine() % (max_length + 1));
    return std::max<int64_t>(0, max_length - static_cast<int64_t>(engine() % 8));
  };
  if (c.form == Form::kPrefill) {
    for (int64_t r = 0; r < c.rows; ++r) {
      const int64_t start =
          c.lengths == Lengths::kFull
              ? 0
              : static_cast<int64_t>(engine() % std::min<int64_t>(41, c.width + 1));
      const int64_t length = draw_length(c.width - start);
      in.ks.push_back(static_cast<int32_t>(start));
      in.ke.push_back(static_cast<int32_t>(start + length));
    }
  } else {
    const int64_t requests = c.form == Form::kDecode ? c.rows : c.rows / c.next_n;
    for (int64_t b = 0; b < requests; ++b) {
      if (c.form == Form::kDecode2D) {
        for (int j = 0; j < c.next_n; ++j)
          in.lengths.push_back(static_cast<int32_t>(draw_length(c.width)));
      } else {
        in.lengths.push_back(static_cast<int32_t>(draw_length(c.width)));
      }
    }
  }
  return in;
}

// The ranges over host or device copies of the range arrays.
RowRanges make_ranges(const Case& c, const Inputs& in, const void* ks, const void* ke,
                      const void* lengths, Device device) {
  if (c.form == Form::kPrefill) {
    return RowRanges::prefill(
        TensorView::contiguous(const_cast<void*>(ks), DType::kI32, {c.rows}, device),
        TensorView::contiguous(const_cast<void*>(ke), DType::kI32, {c.rows}, device));
  }
  const int64_t count = static_cast<int64_t>(in.lengths.size());
  if (c.form == Form::kDecode) {
    return RowRanges::decode(
        TensorView::contiguous(const_cast<void*>(lengths), DType::kI32, {count}, device), 1);
  }
  if (c.form == Form::kDecodeNextN) {
    return RowRanges::decode(
        TensorView::contiguous(const_cast<void*>(lengths), DType::kI32, {count}, device), c.next_n);
  }
  return RowRanges::decode(TensorView::contiguous(const_cast<void*>(lengths), DType::kI32,
                                                  {count / c.next_n, c.next_n}, device),
                           c.next_n);
}

// Reference answer [rows, k] sorted best first, -1 padded.
std::vector<int32_t> reference_answer(const Case& c, const Inputs& in) {
  std::vector<int32_t> expected(static_cast<size_t>(c.rows * c.k));
  const TensorView logits = c.bf16 ? TensorView::contiguous(const_cast<uint16_t*>(in.bf16.data()),
                                                            DType::kBF16, {c.rows, c.width})
                                         .with_row_stride(in.stride)
                                   : TensorView::contiguous(const_cast<float*>(in.scores.data()),
                                                            DType::kF32, {c.rows, c.width})
                                         .with_row_stride(in.stride);
  const RowRanges ranges =
      make_ranges(c, in, in.ks.data(), in.ke.data(), in.lengths.data(), Device::kCPU);
  reference::topk_per_row(TensorView::contiguous(expected.data(), DType::kI32, {c.rows, c.k}),
                          logits, ranges, c.k);
  return expected;
}

// Compares one GPU output [rows, out_stride] with the reference [rows, k].
void expect_matches(const Case& c, const std::vector<int32_t>& got, int64_t out_stride,
                    const std::vector<int32_t>& expected, uint64_t seed) {
  int reported = 0;
  for (int64_t r = 0; r < c.rows && reported < 5; ++r) {
    const int32_t* g = got.data() + r * out_stride;
    const int32_t* e = expected.data() + r * c.k;
    std::vector<int32_t> a(g, g + c.k);
    std::vector<int32_t> b(e, e + c.k);
    if (!c.sorted) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
    }
    bool untouched = true;
    for (int64_t j = c.k; j < out_stride; ++j) untouched &= g[j] == kPoison;
    // An unsorted answer lists its indices in ascending order (the valid prefix).
    bool ascending = true;
    for (int64_t j = 1; !c.sorted && j < c.k && g[j] >= 0; ++j) ascending &= g[j - 1] < g[j];
    if (!ascending) {
      ADD_FAILURE() << describe(c) << " seed=" << seed << ": row " << r
                    << " is unsorted but not in ascending index order";
      ++reported;
    }
    if (a != b || !untouched) {
      int64_t first = 0;
      while (first < c.k && a[first] == b[first]) ++first;
      ADD_FAILURE() << describe(c) << " seed=" << seed << ": row " << r << " differs"
                    << (untouched ? "" : " (columns >= k were written)") << "; first mismatch at "
                    << first << ": got " << (first < c.k ? a[first] : 0) << ", expected "
                    << (first < c.k ? b[first] : 0);
      ++reported;
    }
  }
}

// Runs one case end to end: upload, run twice (bit-identical), compare with the reference.
void run_case(const Case& c) {
  const uint64_t seed = fitest::test_seed();
  SCOPED_TRACE(describe(c) + " seed=" + std::to_string(seed));
  const Inputs in = make_inputs(c, seed);
  const size_t element = c.bf16 ? 2 : 4;
  DeviceBuffer logits_buffer(static_cast<size_t>(c.rows * in.stride) * element);
  DeviceBuffer ks_buffer(in.ks.size() * 4), ke_buffer(in.ke.size() * 4);
  DeviceBuffer lengths_buffer(in.lengths.size() * 4);
  const int64_t out_stride = c.k + c.out_pad;
  DeviceBuffer out_buffer(static_cast<size_t>(c.rows * out_stride) * 4);
  const size_t workspace_bytes = topk_per_row_cuda_workspace_size(c.rows, c.width, c.k);
  DeviceBuffer workspace(workspace_bytes);
  ASSERT_EQ(logits_buffer.error(), cudaSuccess);
  ASSERT_EQ(out_buffer.error(), cudaSuccess);
  ASSERT_EQ(workspace.error(), cudaSuccess);
  const void* host_logits = c.bf16 ? static_cast<const void*>(in.bf16.data())
                                   : static_cast<const void*>(in.scores.data());
  ASSERT_EQ(
      cudaMemcpy(logits_buffer.get(), host_logits, logits_buffer.bytes(), cudaMemcpyHostToDevice),
      cudaSuccess);
  if (!in.ks.empty()) {
    ASSERT_EQ(cudaMemcpy(ks_buffer.get(), in.ks.data(), ks_buffer.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(ke_buffer.get(), in.ke.data(), ke_buffer.bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  if (!in.lengths.empty()) {
    ASSERT_EQ(cudaMemcpy(lengths_buffer.get(), in.lengths.data(), lengths_buffer.bytes(),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  const TensorView logits =
      TensorView::contiguous(logits_buffer.get(), c.bf16 ? DType::kBF16 : DType::kF32,
                             {c.rows, c.width}, Device::kCUDA)
          .with_row_stride(in.stride);
  const TensorView out =
      TensorView::contiguous(out_buffer.get(), DType::kI32, {c.rows, c.k}, Device::kCUDA)
          .with_row_stride(out_stride);
  const RowRanges ranges =
      make_ranges(c, in, ks_buffer.get(), ke_buffer.get(), lengths_buffer.get(), Device::kCUDA);
  RunOptions options;
  options.workspace = workspace.get();
  options.workspace_bytes = workspace_bytes;
  TopKOptions topk_options;
  topk_options.sorted = c.sorted;

  const std::vector<int32_t> expected = reference_answer(c, in);
  std::vector<int32_t> first;
  for (int run = 0; run < 2; ++run) {
    std::vector<int32_t> poison(static_cast<size_t>(c.rows * out_stride), kPoison);
    ASSERT_EQ(
        cudaMemcpy(out_buffer.get(), poison.data(), out_buffer.bytes(), cudaMemcpyHostToDevice),
        cudaSuccess);
    const Status status = topk_per_row(out, logits, ranges, c.k, topk_options, options);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<int32_t> got(poison.size());
    ASSERT_EQ(cudaMemcpy(got.data(), out_buffer.get(), out_buffer.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (run == 0) {
      expect_matches(c, got, out_stride, expected, seed);
      first = got;
    } else {
      EXPECT_TRUE(got == first) << describe(c) << " seed=" << seed
                                << ": a second run gave different bits";
    }
  }
}

TEST(TopKLaunch, SelectionCapacityIsKRoundedUpToAPowerOfTwo) {
  // Host arithmetic (the kernels compute it per row too): the loop it replaced, for every k.
  for (int k = 0; k <= 2 * flashindexer::kMaxTopK + 1; ++k) {
    int expected = 1;
    while (expected < k) expected *= 2;
    ASSERT_EQ(flashindexer::cuda::topk::selection_capacity(k), expected) << "k=" << k;
  }
}

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
        EXPECT_TRUE(batched == alone) << "k=" << k << (sorted ? " sorted" : " unsorted")
                                      << ": the answer differs at " << rows
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
