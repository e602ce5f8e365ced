// SPDX-License-Identifier: Apache-2.0
// The paged K cache (kcache.h, spec §4): insert_k_cache and gather_k_workspace.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

TEST(KCache, PageBytesFollowTheLayout) {
  EXPECT_EQ(PagedKCache::bytes_per_key(KFormat::kFP8, 128), 132);
  EXPECT_EQ(PagedKCache::bytes_per_key(KFormat::kMXFP4, 128), 68);
  EXPECT_EQ(PagedKCache::bytes_per_key(KFormat::kFP8, 64), 68);
  EXPECT_EQ(PagedKCache::bytes_per_key(KFormat::kMXFP4, 64), 34);
  EXPECT_EQ(PagedKCache::page_bytes(KFormat::kFP8, 64, 128), 64 * 132);
  EXPECT_EQ(PagedKCache::page_bytes(KFormat::kMXFP4, 32, 128), 32 * 68);
  PagedKCache cache;
  cache.format = KFormat::kMXFP4;
  cache.head_dim = 128;
  EXPECT_EQ(cache.value_bytes_per_key(), 64);
  EXPECT_EQ(cache.scale_bytes_per_key(), 4);
  cache.format = KFormat::kFP8;
  cache.head_dim = 64;
  EXPECT_EQ(cache.value_bytes_per_key(), 64);
  EXPECT_EQ(cache.scale_bytes_per_key(), 4);
}

struct CacheCase {
  KFormat format;
  int page_size;
  int head_dim;
  int64_t stride_pad_bytes;
  DType key_dtype;
  DType slot_dtype;
};

std::string describe(const CacheCase& c) {
  return std::string(kformat_name(c.format)) + " page_size=" + std::to_string(c.page_size) +
         " D=" + std::to_string(c.head_dim) + " stride_pad=" + std::to_string(c.stride_pad_bytes) +
         " keys " + dtype_name(c.key_dtype) + " slot_mapping " + dtype_name(c.slot_dtype);
}

// Keys of `rows` rows in f32 or bf16, built from `x`.
HostTensor key_tensor(DType dtype, const std::vector<float>& x, int64_t rows, int head_dim) {
  HostTensor keys(dtype, {rows, head_dim});
  for (int64_t i = 0; i < rows * head_dim; ++i) {
    if (dtype == DType::kBF16) {
      keys.data<uint16_t>()[i] = float_to_bf16(x[i]);
    } else {
      keys.data<float>()[i] = x[i];
    }
  }
  return keys;
}

// Insert every request's keys in a shuffled order (with skipped slots and ignored padding
// rows), check the bytes of the cache directly, then gather and compare with the public
// quantizer applied to the same keys.
void check_round_trip(Rng& rng, const CacheCase& c) {
  SCOPED_TRACE(describe(c));
  const int D = c.head_dim;
  const int ps = c.page_size;
  const int64_t vb = value_bytes_per_row(c.format, D);
  const int64_t sb = scale_bytes_per_row(c.format, D);

  // Requests and their lengths: one empty, one exactly a page multiple, the rest random.
  const int R = static_cast<int>(rng.uniform_int(3, 5));
  std::vector<int64_t> lens(R);
  for (int r = 0; r < R; ++r) lens[r] = rng.uniform_int(1, 3 * ps);
  lens[rng.uniform_int(1, R - 1)] = 0;
  lens[0] = ps * rng.uniform_int(1, 2);
  std::vector<int32_t> cu(R + 1, 0);
  for (int r = 0; r < R; ++r) cu[r + 1] = cu[r] + static_cast<int32_t>(lens[r]);
  const int64_t total = cu[R];

  // Shuffled pages; the last page in the shuffled order is a trap for the ignored padding.
  int64_t max_pages = 1;
  int64_t used_pages = 0;
  for (int r = 0; r < R; ++r) {
    used_pages += ceil_div(lens[r], ps);
    max_pages = std::max(max_pages, ceil_div(lens[r], ps));
  }
  const int64_t num_pages = used_pages + 2;
  std::vector<int32_t> page_ids(num_pages);
  std::iota(page_ids.begin(), page_ids.end(), 0);
  rng.shuffle(page_ids);
  const int32_t trap_page = page_ids.back();
  HostTensor block_table(DType::kI32, {R, max_pages + 1});
  block_table.fill<int32_t>(0);
  size_t next_page = 0;
  for (int r = 0; r < R; ++r) {
    for (int64_t p = 0; p < ceil_div(lens[r], ps); ++p)
      block_table.at<int32_t>({r, p}) = page_ids[next_page++];
  }
  std::vector<int64_t> slot_of(total);  // logical key (workspace order) -> slot
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < lens[r]; ++j) {
      slot_of[cu[r] + j] = static_cast<int64_t>(block_table.at<int32_t>({r, j / ps})) * ps + j % ps;
    }
  }

  // Logical keys in workspace order and what the public quantizer makes of them.
  const std::vector<float> logical = random_rows(rng, total, D);
  HostTensor logical_keys = key_tensor(c.key_dtype, logical, total, D);
  HostTensor expected_values(c.format == KFormat::kFP8 ? DType::kE4M3 : DType::kE2M1x2,
                             {total, vb});
  HostTensor expected_scales = c.format == KFormat::kFP8 ? HostTensor(DType::kF32, {total})
                                                         : HostTensor(DType::kUE8M0, {total, sb});
  if (c.format == KFormat::kFP8) {
    FI_ASSERT_OK(
        quantize_k_fp8(expected_values.view(), expected_scales.view(), logical_keys.view()));
  } else {
    FI_ASSERT_OK(
        quantize_mxfp4(expected_values.view(), expected_scales.view(), logical_keys.view()));
  }

  // Insertion batch: the logical keys shuffled, skipped junk keys (slot -1) mixed in, then
  // padding rows beyond slot_mapping's length whose would-be slots point into the trap page.
  std::vector<int64_t> order(total);
  std::iota(order.begin(), order.end(), 0);
  const int64_t junk = rng.uniform_int(1, 6);
  for (int64_t i = 0; i < junk; ++i) order.push_back(-1);
  rng.shuffle(order);
  const int64_t inserted = static_cast<int64_t>(order.size());
  const int64_t padding_rows = 4;
  std::vector<float> batch = random_rows(rng, inserted + padding_rows, D);
  for (int64_t i = 0; i < inserted; ++i) {
    if (order[i] >= 0) std::copy_n(&logical[order[i] * D], D, &batch[i * D]);
  }
  HostTensor keys = key_tensor(c.key_dtype, batch, inserted + padding_rows, D);
  HostTensor slot_buffer(c.slot_dtype, {inserted + padding_rows});
  for (int64_t i = 0; i < inserted + padding_rows; ++i) {
    const int64_t slot = i < inserted ? (order[i] >= 0 ? slot_of[order[i]] : -1)
                                      : static_cast<int64_t>(trap_page) * ps + (i - inserted);
    if (c.slot_dtype == DType::kI64) {
      slot_buffer.data<int64_t>()[i] = slot;
    } else {
      slot_buffer.data<int32_t>()[i] = static_cast<int32_t>(slot);
    }
  }
  TensorView slot_mapping = slot_buffer.view();
  slot_mapping.shape[0] = inserted;

  const int64_t page_bytes = ps * (vb + sb);
  CacheBuffer cache(c.format, num_pages, ps, D, page_bytes + c.stride_pad_bytes);
  FI_ASSERT_OK(insert_k_cache(cache.cache(), keys.view(), slot_mapping));

  // The page layout, byte for byte; everything else (skipped slots, unused rows, page
  // padding, the trap page) keeps the poison.
  std::vector<bool> written(static_cast<size_t>(cache.total_bytes()), false);
  for (int64_t i = 0; i < total; ++i) {
    const int64_t slot = slot_of[i];
    const int64_t vo = cache.values_offset(slot);
    const int64_t so = cache.scales_offset(slot);
    ASSERT_EQ(std::memcmp(cache.base() + vo, expected_values.bytes() + i * vb, vb), 0)
        << "values of key " << i << " (slot " << slot << ") are not at page offset "
        << vo % cache.cache().page_stride_bytes;
    ASSERT_EQ(std::memcmp(cache.base() + so, expected_scales.bytes() + i * sb, sb), 0)
        << "scales of key " << i << " (slot " << slot << ") are not at page offset "
        << so % cache.cache().page_stride_bytes;
    std::fill_n(written.begin() + vo, vb, true);
    std::fill_n(written.begin() + so, sb, true);
  }
  for (int64_t byte = 0; byte < cache.total_bytes(); ++byte) {
    if (!written[byte]) {
      ASSERT_EQ(cache.base()[byte], kPoisonByte)
          << "byte " << byte << " (page " << byte / cache.cache().page_stride_bytes << ", offset "
          << byte % cache.cache().page_stride_bytes
          << ") was written but belongs to no inserted key";
    }
  }

  // Gather into a workspace longer than needed.
  const int64_t ws_rows = total + 3;
  HostTensor ws_values(c.format == KFormat::kFP8 ? DType::kE4M3 : DType::kE2M1x2, {ws_rows, vb});
  HostTensor ws_scales = c.format == KFormat::kFP8 ? HostTensor(DType::kF32, {ws_rows})
                                                   : HostTensor(DType::kUE8M0, {ws_rows, sb});
  ws_values.fill_bytes(kPoisonByte);
  ws_scales.fill_bytes(kPoisonByte);
  HostTensor cu_seq_lens = i32_tensor(cu);
  FI_ASSERT_OK(gather_k_workspace(ws_values.view(), ws_scales.view(), cache.cache(),
                                  block_table.view(), cu_seq_lens.view()));
  for (int64_t i = 0; i < total; ++i) {
    ASSERT_EQ(std::memcmp(ws_values.bytes() + i * vb, expected_values.bytes() + i * vb, vb), 0)
        << "gathered values of workspace row " << i;
    ASSERT_EQ(std::memcmp(ws_scales.bytes() + i * sb, expected_scales.bytes() + i * sb, sb), 0)
        << "gathered scales of workspace row " << i;
  }
}

TEST(KCache, InsertThenGatherRoundTripsThroughShuffledPages) {
  FI_SEEDED_RNG(rng);
  const int page_sizes[] = {32, 64, 128};
  const KFormat formats[] = {KFormat::kFP8, KFormat::kMXFP4};
  for (KFormat format : formats) {
    for (int page_size : page_sizes) {
      CacheCase c;
      c.format = format;
      c.page_size = page_size;
      c.head_dim = 128;
      c.stride_pad_bytes = 4 * rng.uniform_int(0, 40);
      c.key_dtype = rng.bernoulli(0.5) ? DType::kF32 : DType::kBF16;
      c.slot_dtype = rng.bernoulli(0.5) ? DType::kI64 : DType::kI32;
      check_round_trip(rng, c);
    }
  }
}

TEST(KCache, RoundTripHonoursExactAndPaddedPageStrides) {
  FI_SEEDED_RNG(rng);
  const KFormat formats[] = {KFormat::kFP8, KFormat::kMXFP4};
  for (KFormat format : formats) {
    for (int64_t pad : {int64_t{0}, int64_t{4}, int64_t{132}, int64_t{1000}}) {
      check_round_trip(rng, {format, 64, 128, pad, DType::kF32, DType::kI64});
    }
  }
}

TEST(KCache, RoundTripAcceptsBothSlotMappingDtypesAndKeyDtypes) {
  FI_SEEDED_RNG(rng);
  for (DType slot_dtype : {DType::kI32, DType::kI64}) {
    for (DType key_dtype : {DType::kF32, DType::kBF16}) {
      check_round_trip(rng, {KFormat::kFP8, 32, 128, 8, key_dtype, slot_dtype});
      check_round_trip(rng, {KFormat::kMXFP4, 32, 128, 8, key_dtype, slot_dtype});
    }
  }
}

TEST(KCache, RoundTripWorksAtHeadDim64) {
  FI_SEEDED_RNG(rng);
  check_round_trip(rng, {KFormat::kFP8, 64, 64, 12, DType::kF32, DType::kI64});
  check_round_trip(rng, {KFormat::kMXFP4, 64, 64, 12, DType::kBF16, DType::kI32});
}

// ----------------------------------------------------------------------------- bad input

struct SmallCache {
  CacheBuffer buffer;
  HostTensor keys;
  HostTensor slot_mapping;
};

SmallCache small_cache(KFormat format = KFormat::kFP8) {
  SmallCache s;
  const int64_t page_bytes = PagedKCache::page_bytes(format, 64, 128);
  s.buffer = CacheBuffer(format, 4, 64, 128, page_bytes);
  s.keys = HostTensor(DType::kF32, {3, 128});
  s.keys.fill<float>(1.0f);
  s.slot_mapping = HostTensor(DType::kI64, {3});
  s.slot_mapping.data<int64_t>()[0] = 5;
  s.slot_mapping.data<int64_t>()[1] = -1;
  s.slot_mapping.data<int64_t>()[2] = 200;
  return s;
}

TEST(KCache, InsertRejectsSlotBeyondTheCache) {
  SmallCache s = small_cache();
  s.slot_mapping.data<int64_t>()[2] = 4 * 64;  // num_pages * page_size
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), s.keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"slot_mapping"}));
  for (int64_t byte = 0; byte < s.buffer.total_bytes(); ++byte) {
    ASSERT_EQ(s.buffer.base()[byte], kPoisonByte) << "a rejected insert wrote byte " << byte;
  }
}

TEST(KCache, InsertRejectsPageStrideSmallerThanThePage) {
  SmallCache s = small_cache();
  s.buffer.cache().page_stride_bytes = PagedKCache::page_bytes(KFormat::kFP8, 64, 128) - 4;
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), s.keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"page_stride"}));
}

TEST(KCache, InsertRejectsPageStrideNotMultipleOf4) {
  SmallCache s = small_cache(KFormat::kMXFP4);
  s.buffer.cache().page_stride_bytes = PagedKCache::page_bytes(KFormat::kMXFP4, 64, 128) + 2;
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), s.keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"page_stride"}));
}

TEST(KCache, InsertRejectsKeysOfWrongDtype) {
  SmallCache s = small_cache();
  HostTensor keys(DType::kI32, {3, 128});
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"keys"}));
}

TEST(KCache, InsertRejectsKeyWidthOtherThanHeadDim) {
  SmallCache s = small_cache();
  HostTensor keys(DType::kF32, {3, 64});
  keys.fill<float>(1.0f);
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"keys"}));
}

TEST(KCache, InsertRejectsFewerKeyRowsThanSlots) {
  SmallCache s = small_cache();
  HostTensor keys(DType::kF32, {2, 128});
  keys.fill<float>(1.0f);
  EXPECT_TRUE(
      IsRejectedNamingAnyOf(insert_k_cache(s.buffer.cache(), keys.view(), s.slot_mapping.view()),
                            {StatusCode::kInvalidArgument}, {"keys", "slot_mapping"}));
}

TEST(KCache, InsertRejectsSlotMappingOfWrongDtype) {
  SmallCache s = small_cache();
  HostTensor slots(DType::kF32, {3});
  EXPECT_TRUE(IsRejected(insert_k_cache(s.buffer.cache(), s.keys.view(), slots.view()),
                         StatusCode::kInvalidArgument, {"slot_mapping"}));
}

TEST(KCache, InsertRejectsNullCache) {
  SmallCache s = small_cache();
  PagedKCache cache = s.buffer.cache();
  cache.data = nullptr;
  EXPECT_TRUE(IsRejected(insert_k_cache(cache, s.keys.view(), s.slot_mapping.view()),
                         StatusCode::kInvalidArgument, {"cache"}));
}

struct GatherArgs {
  CacheBuffer buffer;
  HostTensor values;
  HostTensor scales;
  HostTensor block_table;
  HostTensor cu_seq_lens;
};

// Two requests of 70 and 10 keys over 4 pages of 64 keys.
GatherArgs gather_args() {
  GatherArgs g;
  g.buffer =
      CacheBuffer(KFormat::kFP8, 4, 64, 128, PagedKCache::page_bytes(KFormat::kFP8, 64, 128));
  g.values = HostTensor(DType::kE4M3, {100, 128});
  g.scales = HostTensor(DType::kF32, {100});
  g.block_table = HostTensor(DType::kI32, {2, 2});
  g.block_table.data<int32_t>()[0] = 3;
  g.block_table.data<int32_t>()[1] = 1;
  g.block_table.data<int32_t>()[2] = 0;
  g.block_table.data<int32_t>()[3] = 2;
  g.cu_seq_lens = i32_tensor({0, 70, 80});
  return g;
}

TEST(KCache, GatherAcceptsTheValidBaseline) {
  GatherArgs g = gather_args();
  FI_EXPECT_OK(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                  g.block_table.view(), g.cu_seq_lens.view()));
}

TEST(KCache, GatherRejectsBlockTableEntryOutOfRange) {
  for (int32_t bad : {4, -1}) {
    SCOPED_TRACE(::testing::Message() << "entry " << bad);
    GatherArgs g = gather_args();
    g.block_table.data<int32_t>()[1] = bad;  // request 0, page 1: visible (keys 64..69)
    EXPECT_TRUE(IsRejected(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                              g.block_table.view(), g.cu_seq_lens.view()),
                           StatusCode::kInvalidArgument, {"block_table"}));
  }
}

TEST(KCache, GatherRejectsDecreasingCuSeqLens) {
  GatherArgs g = gather_args();
  g.cu_seq_lens = i32_tensor({0, 70, 60});
  EXPECT_TRUE(IsRejected(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                            g.block_table.view(), g.cu_seq_lens.view()),
                         StatusCode::kInvalidArgument, {"cu_seq_lens"}));
}

TEST(KCache, GatherRejectsWorkspaceShorterThanTheKeys) {
  GatherArgs g = gather_args();
  g.values = HostTensor(DType::kE4M3, {79, 128});
  g.scales = HostTensor(DType::kF32, {79});
  EXPECT_TRUE(
      IsRejectedNamingAnyOf(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                               g.block_table.view(), g.cu_seq_lens.view()),
                            {StatusCode::kInvalidArgument}, {"cu_seq_lens", "values"}));
}

TEST(KCache, GatherRejectsRequestLongerThanItsBlockTableRow) {
  GatherArgs g = gather_args();
  g.cu_seq_lens = i32_tensor({0, 129, 139});  // 129 keys need 3 pages; the table has 2
  g.values = HostTensor(DType::kE4M3, {200, 128});
  g.scales = HostTensor(DType::kF32, {200});
  EXPECT_TRUE(
      IsRejectedNamingAnyOf(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                               g.block_table.view(), g.cu_seq_lens.view()),
                            {StatusCode::kInvalidArgument}, {"block_table", "cu_seq_lens"}));
}

TEST(KCache, GatherRejectsValuesOfWrongDtype) {
  GatherArgs g = gather_args();
  g.values = HostTensor(DType::kF32, {100, 128});
  EXPECT_TRUE(IsRejected(gather_k_workspace(g.values.view(), g.scales.view(), g.buffer.cache(),
                                            g.block_table.view(), g.cu_seq_lens.view()),
                         StatusCode::kInvalidArgument, {"values"}));
}

}  // namespace
}  // namespace fitest
