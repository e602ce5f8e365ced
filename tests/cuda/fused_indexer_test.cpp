// SPDX-License-Identifier: Apache-2.0
// The fused CUDA indexer on rows longer than its candidate slots (gated) with adversarial scores,
// 1M-key rows and forced candidate overflows (a small FusedConfig capacity): always the dense
// pair's answer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "indexer_cases.h"

namespace fitest {
namespace {

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
                                              int64_t keys, int k, bool sorted, int64_t batch_rows,
                                              const HostTensor& expected, int capacity = 0) {
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
      EXPECT_TRUE(
          SameTopK(run_decode(device, p.rows(), k, true, workspace, IndexerPath::kFused, capacity),
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
