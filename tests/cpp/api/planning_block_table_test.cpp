// SPDX-License-Identifier: Apache-2.0
// Block tables and cache views between page sizes (planning.h): both directions against direct
// transcriptions (splitting: page a -> a f + i; merging: vLLM's block_table[:, ::f] // f), the
// property that every key lands in the same slot through either table, keys written and gathered
// through the re-sliced view, and the argument errors.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "support/compare.h"
#include "support/seed.h"
#include "support/tensors.h"

namespace fitest {
namespace {

struct Table {
  int64_t rows = 0, cols = 0;
  std::vector<int32_t> pages;  // [rows, cols] row-major
  std::vector<int64_t> key_lens;
};

// A table of allocation pages: distinct random ids, in aligned runs of `run` consecutive ids
// (run 1: any order); each row holds a random number of keys (every column's worth when
// `full`), its unused columns padded with `padding`.
Table random_table(Rng& rng, int allocation_page_size, int run, int32_t padding, bool full) {
  Table t;
  t.rows = rng.uniform_int(1, 6);
  t.cols = run * rng.uniform_int(1, 5) + (run > 1 ? rng.uniform_int(0, run - 1) : 0);
  const int64_t groups = t.rows * ((t.cols + run - 1) / run) + 3;
  std::vector<int32_t> group_ids(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) group_ids[g] = static_cast<int32_t>(g);
  rng.shuffle(group_ids);
  size_t next_group = 0;
  for (int64_t r = 0; r < t.rows; ++r) {
    const int64_t keys =
        full ? t.cols * allocation_page_size : rng.uniform_int(0, t.cols * allocation_page_size);
    const int64_t used = (keys + allocation_page_size - 1) / allocation_page_size;
    t.key_lens.push_back(keys);
    int32_t base = 0;
    for (int64_t c = 0; c < t.cols; ++c) {
      if (c % run == 0) base = group_ids[next_group++] * run;
      t.pages.push_back(c < used ? base + static_cast<int32_t>(c % run) : padding);
    }
  }
  return t;
}

// The slot of key s of `row` through a table of `page_size`-key pages.
int64_t slot_of(const std::vector<int32_t>& table, int64_t cols, int64_t row, int64_t s,
                int page_size) {
  return int64_t{table[row * cols + s / page_size]} * page_size + s % page_size;
}

TEST(BlockTable, SplittingGivesEachAllocationPageItsKernelPages) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 500; ++trial) {
    const int kernel = static_cast<int>(rng.pick(std::vector<int64_t>{16, 32, 64}));
    const int factor = static_cast<int>(rng.pick(std::vector<int64_t>{1, 2, 4, 8}));
    const int allocation = kernel * factor;
    const bool with_lens = rng.bernoulli(0.5);
    Table t = random_table(rng, allocation, 1, -1, !with_lens);
    const int64_t kernel_cols = resliced_block_table_cols(t.cols, allocation, kernel);
    ASSERT_EQ(kernel_cols, t.cols * factor);
    std::vector<int32_t> out(static_cast<size_t>(t.rows * kernel_cols), kPoisonIndex);
    FI_ASSERT_OK(reslice_block_table(
        out, t.pages, t.rows, t.cols, allocation, kernel,
        with_lens ? std::span<const int64_t>(t.key_lens) : std::span<const int64_t>()));
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t used_kernel_pages =
          with_lens ? (t.key_lens[r] + kernel - 1) / kernel : kernel_cols;
      for (int64_t j = 0; j < kernel_cols; ++j) {
        const int32_t expected =
            j < used_kernel_pages ? t.pages[r * t.cols + j / factor] * factor + j % factor : -1;
        ASSERT_EQ(out[r * kernel_cols + j], expected) << "row " << r << " kernel column " << j;
      }
      const int64_t keys = t.key_lens[r];
      for (int64_t s = 0; s < keys; ++s) {
        ASSERT_EQ(slot_of(out, kernel_cols, r, s, kernel),
                  slot_of(t.pages, t.cols, r, s, allocation))
            << "row " << r << " key " << s;
      }
    }
  }
}

TEST(BlockTable, MergingIsTheStridedSliceDividedByTheFactor) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 500; ++trial) {
    const int allocation = static_cast<int>(rng.pick(std::vector<int64_t>{8, 16, 32, 64}));
    const int factor = static_cast<int>(rng.pick(std::vector<int64_t>{1, 2, 4, 8}));
    const int kernel = allocation * factor;
    const bool with_lens = rng.bernoulli(0.5);
    // Padding past the keys is 0, as vLLM pads: only the pages holding keys must form runs.
    Table t = random_table(rng, allocation, factor, 0, !with_lens);
    const int64_t kernel_cols = resliced_block_table_cols(t.cols, allocation, kernel);
    ASSERT_EQ(kernel_cols, (t.cols + factor - 1) / factor);
    std::vector<int32_t> out(static_cast<size_t>(t.rows * kernel_cols), kPoisonIndex);
    const Status status = reslice_block_table(
        out, t.pages, t.rows, t.cols, allocation, kernel,
        with_lens ? std::span<const int64_t>(t.key_lens) : std::span<const int64_t>());
    FI_ASSERT_OK(status);
    for (int64_t r = 0; r < t.rows; ++r) {
      const int64_t keys = t.key_lens[r];
      const int64_t used_kernel_pages = (keys + kernel - 1) / kernel;
      for (int64_t j = 0; j < kernel_cols; ++j) {
        // block_table[:, ::f] // f
        const int32_t expected =
            j < used_kernel_pages ? t.pages[r * t.cols + j * factor] / factor : -1;
        ASSERT_EQ(out[r * kernel_cols + j], expected) << "row " << r << " kernel column " << j;
      }
      for (int64_t s = 0; s < keys; ++s) {
        ASSERT_EQ(slot_of(out, kernel_cols, r, s, kernel),
                  slot_of(t.pages, t.cols, r, s, allocation))
            << "row " << r << " key " << s;
      }
    }
  }
}

// Keys written through the split cache view (slot ids of the allocation pages, unchanged) and
// gathered through the split view and the re-sliced table come back in order.
TEST(BlockTable, KeysWrittenAndGatheredThroughTheSplitViewRoundTrip) {
  FI_SEEDED_RNG(rng);
  constexpr int kDim = 128;
  constexpr int kAllocation = 256;
  constexpr int kKernel = 64;
  constexpr int64_t kAllocationPages = 6;
  const int64_t page_stride = PagedKCache::page_bytes(KFormat::kFP8, kAllocation, kDim) + 64;
  HostTensor memory(DType::kU8, {kAllocationPages * page_stride});
  memory.fill_bytes(kPoisonByte);
  PagedKCache allocation_cache;
  allocation_cache.data = memory.data<uint8_t>();
  allocation_cache.num_pages = kAllocationPages;
  allocation_cache.page_size = kAllocation;
  allocation_cache.head_dim = kDim;
  allocation_cache.page_stride_bytes = page_stride;
  PagedKCache kernel_cache;
  FI_ASSERT_OK(reslice_k_cache(kernel_cache, allocation_cache, kKernel));
  ASSERT_EQ(kernel_cache.num_pages, kAllocationPages * 4);
  ASSERT_EQ(kernel_cache.page_stride_bytes, page_stride / 4);

  // One request over allocation pages {4, 1, 3}, 700 keys.
  const std::vector<int32_t> table = {4, 1, 3};
  const int64_t keys = 700;
  std::vector<int64_t> slots;
  for (int64_t s = 0; s < keys; ++s)
    slots.push_back(int64_t{table[s / kAllocation]} * kAllocation + s % kAllocation);
  const std::vector<float> values = random_rows(rng, keys, kDim);
  const TensorView key_view =
      TensorView::contiguous(const_cast<float*>(values.data()), DType::kF32, {keys, kDim});
  FI_ASSERT_OK(insert_k_cache(kernel_cache, key_view,
                              TensorView::contiguous(slots.data(), DType::kI64, {keys})));

  std::vector<int32_t> kernel_table(
      static_cast<size_t>(resliced_block_table_cols(3, kAllocation, kKernel)));
  const std::vector<int64_t> key_lens = {keys};
  FI_ASSERT_OK(reslice_block_table(kernel_table, table, 1, 3, kAllocation, kKernel, key_lens));
  HostTensor gathered_values(DType::kE4M3, {keys, kDim});
  HostTensor gathered_scales(DType::kF32, {keys});
  std::vector<int32_t> cu = {0, static_cast<int32_t>(keys)};
  FI_ASSERT_OK(
      gather_k_workspace(gathered_values.view(), gathered_scales.view(), kernel_cache,
                         TensorView::contiguous(kernel_table.data(), DType::kI32,
                                                {1, static_cast<int64_t>(kernel_table.size())}),
                         TensorView::contiguous(cu.data(), DType::kI32, {2})));

  HostTensor expected_values(DType::kE4M3, {keys, kDim});
  HostTensor expected_scales(DType::kF32, {keys});
  FI_ASSERT_OK(quantize_k_fp8(expected_values.view(), expected_scales.view(), key_view));
  EXPECT_EQ(
      std::memcmp(gathered_values.bytes(), expected_values.bytes(), expected_values.byte_size()),
      0);
  EXPECT_EQ(
      std::memcmp(gathered_scales.bytes(), expected_scales.bytes(), expected_scales.byte_size()),
      0);
}

TEST(BlockTable, MergedCacheViewSpansFPages) {
  PagedKCache cache;
  cache.num_pages = 10;
  cache.page_size = 16;
  cache.page_stride_bytes = PagedKCache::page_bytes(KFormat::kFP8, 16, 128);
  PagedKCache view;
  FI_ASSERT_OK(reslice_k_cache(view, cache, 64));
  EXPECT_EQ(view.page_size, 64);
  EXPECT_EQ(view.num_pages, 2);  // pages 8 and 9 do not make a whole group of four
  EXPECT_EQ(view.page_stride_bytes, 4 * cache.page_stride_bytes);
}

TEST(BlockTable, RejectsPageSizesThatAreNotMultiples) {
  std::vector<int32_t> table = {0, 1}, out(2);
  EXPECT_EQ(resliced_block_table_cols(2, 48, 32), -1);
  EXPECT_TRUE(IsRejected(reslice_block_table(out, table, 1, 2, 48, 32),
                         StatusCode::kInvalidArgument,
                         {"allocation_page_size=48", "kernel_page_size=32"}));
  EXPECT_TRUE(IsRejected(reslice_block_table(out, table, 1, 2, 0, 32), StatusCode::kInvalidArgument,
                         {"allocation_page_size=0"}));
  PagedKCache cache, view;
  cache.page_size = 64;
  cache.num_pages = 1;
  cache.page_stride_bytes = PagedKCache::page_bytes(KFormat::kFP8, 64, 128);
  EXPECT_TRUE(IsRejected(reslice_k_cache(view, cache, 40), StatusCode::kInvalidArgument,
                         {"kernel_page_size=40"}));
}

TEST(BlockTable, MergingRejectsPagesThatAreNotOneAlignedRun) {
  std::vector<int32_t> out(2);
  // Kernel page of 4 allocation pages: {8, 9, 10, 11} is a run, {5, 6, 7, 8} is not aligned,
  // {8, 10, 9, 11} is out of order.
  const std::vector<int32_t> good = {8, 9, 10, 11, 4, 5, 6, 7};
  FI_EXPECT_OK(reslice_block_table(out, good, 1, 8, 16, 64));
  EXPECT_EQ(out, (std::vector<int32_t>{2, 1}));
  EXPECT_TRUE(IsRejected(
      reslice_block_table(out, std::vector<int32_t>{5, 6, 7, 8, 4, 5, 6, 7}, 1, 8, 16, 64),
      StatusCode::kInvalidArgument, {"block_table[0, 0]=5"}));
  EXPECT_TRUE(IsRejected(
      reslice_block_table(out, std::vector<int32_t>{8, 10, 9, 11, 4, 5, 6, 7}, 1, 8, 16, 64),
      StatusCode::kInvalidArgument, {"block_table[0, 1]=10"}));
  // With 70 keys only pages 0..4 hold keys: column 5 onwards may be anything.
  const std::vector<int64_t> lens = {70};
  FI_EXPECT_OK(
      reslice_block_table(out, std::vector<int32_t>{8, 9, 10, 11, 4, 0, 0, 0}, 1, 8, 16, 64, lens));
  EXPECT_EQ(out, (std::vector<int32_t>{2, 1}));
}

TEST(BlockTable, RejectsBadSizesLengthsAndPages) {
  std::vector<int32_t> table = {3, -1}, out(4);
  EXPECT_TRUE(IsRejected(reslice_block_table(out, table, 1, 2, 64, 32),
                         StatusCode::kInvalidArgument, {"block_table[0, 1]=-1"}));
  const std::vector<int64_t> one_page = {64};
  FI_EXPECT_OK(reslice_block_table(out, table, 1, 2, 64, 32, one_page));
  EXPECT_EQ(out, (std::vector<int32_t>{6, 7, -1, -1}));
  const std::vector<int64_t> too_long = {129};
  EXPECT_TRUE(IsRejected(reslice_block_table(out, table, 1, 2, 64, 32, too_long),
                         StatusCode::kInvalidArgument, {"key_lens entry 0 is 129"}));
  std::vector<int32_t> short_out(3);
  EXPECT_TRUE(IsRejected(reslice_block_table(short_out, table, 1, 2, 64, 32, one_page),
                         StatusCode::kInvalidArgument, {"kernel_table has 3 entries"}));
  EXPECT_TRUE(IsRejected(reslice_block_table(out, table, 2, 2, 64, 32, one_page),
                         StatusCode::kInvalidArgument, {"block_table has 2 entries"}));
  const std::vector<int32_t> huge = {0x40000000};
  EXPECT_TRUE(IsRejected(reslice_block_table(out, huge, 1, 1, 256, 64),
                         StatusCode::kInvalidArgument, {"block_table[0, 0]=1073741824"}));
}

}  // namespace
}  // namespace fitest
