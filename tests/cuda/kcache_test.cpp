// SPDX-License-Identifier: Apache-2.0
// insert_k_cache and gather_k_workspace on CUDA tensors against the CPU ops, byte for byte over
// the whole cache or workspace (so untouched bytes must keep their poison on both): FP8 and
// MXFP4, bf16 and f32 keys, i32 and i64 slot mappings with padding (-1) slots and ignored rows,
// shuffled pages, page strides wider than the page (and not 16-byte multiples: the scalar path),
// an unaligned cache base, fused RoPE, and the device-side values the host cannot check (slots
// past the cache, block-table entries out of range, a workspace shorter than the lengths).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "support/compare.h"
#include "support/cuda.h"
#include "support/query_inputs.h"

namespace fitest {
namespace {

struct InsertCase {
  KFormat format;
  DType key_dtype;
  DType slot_dtype;
  int page_size;
  int head_dim;
  int64_t stride_pad;  // bytes past the page (a multiple of 4)
  RopeStyle rope;
};

// A page stride the cache ops take: the page's bytes rounded up to 4 (MXFP4 pages of odd
// sizes are not), then `pad` more bytes.
int64_t page_stride_of(KFormat format, int page_size, int head_dim, int64_t pad) {
  return ceil_div(PagedKCache::page_bytes(format, page_size, head_dim), 4) * 4 + pad;
}

std::string describe(const InsertCase& c) {
  return std::string(kformat_name(c.format)) + " keys " + dtype_name(c.key_dtype) + " slots " +
         dtype_name(c.slot_dtype) + " page_size " + std::to_string(c.page_size) + " D " +
         std::to_string(c.head_dim) + " stride_pad " + std::to_string(c.stride_pad) + " rope " +
         rope_style_name(c.rope);
}

// A batch of keys to insert: rows [0, mapped) have slots (shuffled, some -1), the rest are
// graph padding that must not be read.
struct InsertBatch {
  HostTensor keys, slots, table, positions;
  int64_t mapped = 0;
  KeyInsertOptions insert;
  TensorView slot_view() const {
    TensorView v = slots.view();
    v.shape[0] = mapped;
    return v;
  }
};

InsertBatch make_batch(Rng& rng, const InsertCase& c, int64_t num_slots, int64_t mapped) {
  InsertBatch b;
  b.mapped = mapped;
  const int64_t rows = mapped + 5;
  std::vector<float> x = query_values(rng, rows, c.head_dim);
  b.keys = float_tensor(c.key_dtype, {rows, c.head_dim}, x);
  std::vector<int64_t> slot_ids(static_cast<size_t>(num_slots));
  std::iota(slot_ids.begin(), slot_ids.end(), 0);
  rng.shuffle(slot_ids);
  b.slots = HostTensor(c.slot_dtype, {rows});
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t slot = (i % 9 == 4 || i >= static_cast<int64_t>(slot_ids.size()))
                             ? -1
                             : (i >= mapped ? slot_ids[0] : slot_ids[i]);  // padding: a live slot
    if (c.slot_dtype == DType::kI64) {
      b.slots.data<int64_t>()[i] = slot;
    } else {
      b.slots.data<int32_t>()[i] = static_cast<int32_t>(slot);
    }
  }
  std::vector<float> table_values;
  b.table = cos_sin_cache(DType::kF32, 4096, table_values);
  std::vector<int64_t> positions;
  b.positions = position_tensor(rng, DType::kI64, rows, 4096, positions);
  b.insert.rope.style = c.rope;
  b.insert.rope.dims = c.rope == RopeStyle::kNeox ? RopeDims::kFirst64 : RopeDims::kLast64;
  if (c.rope != RopeStyle::kNone) {
    b.insert.rope.cos_sin_cache = b.table.view();
    b.insert.rope.positions = b.positions.view();
  }
  return b;
}

// The batch inserted by the GPU into a device copy of `host_cache` (whose bytes it returns in
// `got`); `base_offset` shifts the cache's base by that many bytes.
void insert_on_gpu(std::vector<uint8_t>& got, CacheBuffer& host_cache, const InsertBatch& b,
                   int64_t base_offset = 0) {
  const size_t bytes = static_cast<size_t>(host_cache.total_bytes()) + 16;
  DeviceBuffer buffer(bytes);
  ASSERT_EQ(cudaMemcpy(buffer.get(), host_cache.base(), bytes, cudaMemcpyHostToDevice),
            cudaSuccess);
  PagedKCache cache = host_cache.cache();
  cache.data = static_cast<uint8_t*>(buffer.get()) + base_offset;
  cache.device = Device::kCUDA;
  const DeviceTensor keys = to_device(b.keys);
  const DeviceTensor slots = to_device(b.slots);
  const DeviceTensor table = to_device(b.table);
  const DeviceTensor positions = to_device(b.positions);
  KeyInsertOptions insert = b.insert;
  if (insert.rope.enabled()) {
    insert.rope.cos_sin_cache = table.view;
    insert.rope.positions = positions.view;
  }
  TensorView slot_view = slots.view;
  slot_view.shape[0] = b.mapped;
  for (int repeat = 0; repeat < 2; ++repeat) {  // idempotent: the same bytes twice
    FI_ASSERT_OK(insert_k_cache(cache, keys.view, slot_view, insert));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  got.resize(bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), buffer.get(), bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

::testing::AssertionResult SameCacheBytes(const std::vector<uint8_t>& got, CacheBuffer& want) {
  const int64_t stride = want.cache().page_stride_bytes;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want.base()[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << " (page " << static_cast<int64_t>(i) / stride << ", offset "
             << static_cast<int64_t>(i) % stride << "): got " << int{got[i]} << ", expected "
             << int{want.base()[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(InsertKCacheCuda, MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (DType key_dtype : {DType::kBF16, DType::kF32}) {
      for (int head_dim : {128, 64}) {  // the head dims the cache ops take
        for (int64_t stride_pad : {0, 4, 512}) {
          for (RopeStyle rope : {RopeStyle::kNone, RopeStyle::kNeox, RopeStyle::kInterleaved}) {
            // Page sizes of both kinds for the slot -> page split: powers of two and not.
            const InsertCase c{format,
                               key_dtype,
                               rng.bernoulli(0.5) ? DType::kI64 : DType::kI32,
                               static_cast<int>(rng.pick(std::vector<int64_t>{16, 64, 7, 100})),
                               head_dim,
                               stride_pad,
                               rope};
            SCOPED_TRACE(describe(c));
            const int64_t pages = rng.uniform_int(1, 40);
            const int64_t stride = page_stride_of(format, c.page_size, head_dim, stride_pad);
            CacheBuffer want(format, pages, c.page_size, head_dim, stride);
            CacheBuffer start(format, pages, c.page_size, head_dim, stride);
            const int64_t num_slots = pages * c.page_size;
            const InsertBatch b = make_batch(rng, c, num_slots, rng.uniform_int(0, num_slots));
            FI_ASSERT_OK(insert_k_cache(want.cache(), b.keys.view(), b.slot_view(), b.insert));
            std::vector<uint8_t> got;
            insert_on_gpu(got, start, b);
            ASSERT_TRUE(SameCacheBytes(got, want));
          }
        }
      }
    }
  }
}

TEST(InsertKCacheCuda, UnalignedCacheBaseMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    const InsertCase c{format, DType::kBF16, DType::kI64, 64, 128, 0, RopeStyle::kNone};
    SCOPED_TRACE(describe(c));
    const int64_t pages = 8;
    const int64_t page_bytes = PagedKCache::page_bytes(format, 64, 128);
    CacheBuffer want(format, pages, 64, 128, page_bytes);
    CacheBuffer start(format, pages, 64, 128, page_bytes);
    const InsertBatch b = make_batch(rng, c, pages * 64, 300);
    PagedKCache shifted = want.cache();
    shifted.data = want.base() + 4;  // the buffer holds 16 bytes past the last page
    FI_ASSERT_OK(insert_k_cache(shifted, b.keys.view(), b.slot_view(), b.insert));
    std::vector<uint8_t> got;
    insert_on_gpu(got, start, b, 4);
    ASSERT_TRUE(SameCacheBytes(got, want));
  }
}

// Slots past the cache cannot be checked on the host for CUDA tensors: the kernel skips them,
// which is what the CPU does with those slots set to -1.
TEST(InsertKCacheCuda, SlotsPastTheCacheAreSkipped) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (DType slot_dtype : {DType::kI64, DType::kI32}) {
    const InsertCase c{KFormat::kFP8, DType::kBF16, slot_dtype, 16, 128, 0, RopeStyle::kNone};
    const int64_t pages = 4;
    const int64_t page_bytes = PagedKCache::page_bytes(KFormat::kFP8, 16, 128);
    CacheBuffer want(KFormat::kFP8, pages, 16, 128, page_bytes);
    CacheBuffer start(KFormat::kFP8, pages, 16, 128, page_bytes);
    InsertBatch b = make_batch(rng, c, pages * 16, 40);
    const int64_t past[] = {pages * 16, pages * 16 + 1,
                            slot_dtype == DType::kI64 ? (1ll << 40) : (1ll << 30)};
    for (int i = 0; i < 3; ++i) {
      const int64_t row = 10 + 7 * i;
      if (slot_dtype == DType::kI64) {
        b.slots.data<int64_t>()[row] = past[i];
      } else {
        b.slots.data<int32_t>()[row] = static_cast<int32_t>(past[i]);
      }
    }
    std::vector<uint8_t> got;
    insert_on_gpu(got, start, b);
    for (int i = 0; i < 3; ++i) {
      const int64_t row = 10 + 7 * i;
      if (slot_dtype == DType::kI64) {
        b.slots.data<int64_t>()[row] = -1;
      } else {
        b.slots.data<int32_t>()[row] = -1;
      }
    }
    FI_ASSERT_OK(insert_k_cache(want.cache(), b.keys.view(), b.slot_view(), b.insert));
    ASSERT_TRUE(SameCacheBytes(got, want));
  }
}

// ---------------------------------------------------------------------------------------------
// gather_k_workspace

struct GatherProblem {
  CacheBuffer cache;
  HostTensor block_table, cu_seq_lens;
  int64_t total = 0;
};

// Pages of random bytes (gather copies bytes, whatever they encode), requests of the given
// lengths on shuffled pages, table columns past a request's pages left at -1.
GatherProblem make_gather(Rng& rng, KFormat format, int page_size, int head_dim, int64_t stride_pad,
                          const std::vector<int64_t>& lens) {
  GatherProblem p;
  const int R = static_cast<int>(lens.size());
  int64_t used = 0, widest = 1;
  for (int64_t len : lens) {
    used += ceil_div(len, page_size);
    widest = std::max(widest, ceil_div(len, page_size));
  }
  const int64_t pages = used + 3;
  p.cache = CacheBuffer(format, pages, page_size, head_dim,
                        page_stride_of(format, page_size, head_dim, stride_pad));
  for (int64_t i = 0; i < p.cache.total_bytes(); ++i)
    p.cache.base()[i] = static_cast<uint8_t>(rng.bits32());
  std::vector<int32_t> ids(static_cast<size_t>(pages));
  std::iota(ids.begin(), ids.end(), 0);
  rng.shuffle(ids);
  p.block_table = HostTensor(DType::kI32, {R, widest + 2});
  p.block_table.fill<int32_t>(-1);
  std::vector<int32_t> cu(R + 1, 0);
  size_t next = 0;
  for (int r = 0; r < R; ++r) {
    for (int64_t c = 0; c < ceil_div(lens[r], page_size); ++c)
      p.block_table.at<int32_t>({r, c}) = ids[next++];
    cu[r + 1] = cu[r] + static_cast<int32_t>(lens[r]);
  }
  p.cu_seq_lens = i32_tensor(cu);
  p.total = cu[R];
  return p;
}

struct Workspace {
  HostTensor values, scales;
};

Workspace poisoned_workspace(KFormat format, int head_dim, int64_t rows, int64_t row_pad) {
  const int64_t vb = format == KFormat::kFP8 ? head_dim : head_dim / 2;
  Workspace ws;
  ws.values = HostTensor(format == KFormat::kFP8 ? DType::kE4M3 : DType::kE2M1x2, {rows, vb},
                         row_pad > 0 ? vb + row_pad : 0);
  ws.scales = format == KFormat::kFP8 ? HostTensor(DType::kF32, {rows})
                                      : HostTensor(DType::kUE8M0, {rows, head_dim / 32},
                                                   row_pad > 0 ? head_dim / 32 + 3 : 0);
  ws.values.fill_bytes(kPoisonByte);
  ws.scales.fill_bytes(kPoisonByte);
  return ws;
}

// Gathers on the GPU into a poisoned workspace; returns it on the host.
Workspace gather_on_gpu(GatherProblem& p, KFormat format, int head_dim, int64_t rows,
                        int64_t row_pad) {
  Workspace got = poisoned_workspace(format, head_dim, rows, row_pad);
  DeviceTensor values = to_device(got.values);
  DeviceTensor scales = to_device(got.scales);
  const DeviceCache cache = to_device(p.cache);
  const DeviceTensor table = to_device(p.block_table);
  const DeviceTensor cu = to_device(p.cu_seq_lens);
  EXPECT_TRUE(gather_k_workspace(values.view, scales.view, cache.cache, table.view, cu.view).ok());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  to_host(got.values, values);
  to_host(got.scales, scales);
  return got;
}

::testing::AssertionResult SameBytes(const HostTensor& got, const HostTensor& want) {
  for (size_t i = 0; i < want.byte_size(); ++i) {
    if (got.bytes()[i] != want.bytes()[i]) {
      return ::testing::AssertionFailure() << "byte " << i << ": got " << int{got.bytes()[i]}
                                           << ", expected " << int{want.bytes()[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(GatherKWorkspaceCuda, MatchesTheCpuByteForByte) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (int head_dim : {128, 64}) {
      for (int64_t stride_pad : {0, 4, 1024}) {
        for (int64_t row_pad : {0, 3}) {
          const int page_size =
              static_cast<int>(rng.pick(std::vector<int64_t>{16, 64, 128, 7, 100}));
          SCOPED_TRACE(::testing::Message()
                       << kformat_name(format) << " D " << head_dim << " page_size " << page_size
                       << " stride_pad " << stride_pad << " row_pad " << row_pad);
          std::vector<int64_t> lens(static_cast<size_t>(rng.uniform_int(1, 12)));
          for (int64_t& len : lens) len = rng.bernoulli(0.2) ? 0 : rng.uniform_int(1, 700);
          lens[0] = rng.bernoulli(0.5) ? page_size * 3 : lens[0];
          GatherProblem p = make_gather(rng, format, page_size, head_dim, stride_pad, lens);
          const int64_t rows = p.total + rng.uniform_int(0, 50);
          Workspace want = poisoned_workspace(format, head_dim, rows, row_pad);
          FI_ASSERT_OK(gather_k_workspace(want.values.view(), want.scales.view(), p.cache.cache(),
                                          p.block_table.view(), p.cu_seq_lens.view()));
          const Workspace got = gather_on_gpu(p, format, head_dim, rows, row_pad);
          ASSERT_TRUE(SameBytes(got.values, want.values));
          ASSERT_TRUE(SameBytes(got.scales, want.scales));
        }
      }
    }
  }
}

TEST(GatherKWorkspaceCuda, OneLongRequestAmongShortOnesMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    std::vector<int64_t> lens(200);
    for (int64_t& len : lens) len = rng.uniform_int(0, 40);
    lens[rng.uniform_int(0, 199)] = 70000;
    GatherProblem p = make_gather(rng, format, 64, 128, 0, lens);
    Workspace want = poisoned_workspace(format, 128, p.total, 0);
    FI_ASSERT_OK(gather_k_workspace(want.values.view(), want.scales.view(), p.cache.cache(),
                                    p.block_table.view(), p.cu_seq_lens.view()));
    const Workspace got = gather_on_gpu(p, format, 128, p.total, 0);
    ASSERT_TRUE(SameBytes(got.values, want.values)) << kformat_name(format);
    ASSERT_TRUE(SameBytes(got.scales, want.scales)) << kformat_name(format);
  }
}

// Block-table entries outside [0, num_pages) cannot be checked on the host for CUDA tensors:
// their keys are not written (they keep the poison); every other key is the CPU's.
TEST(GatherKWorkspaceCuda, KeysOnOutOfRangePagesAreNotWritten) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  const int page_size = 16;
  GatherProblem p = make_gather(rng, KFormat::kFP8, page_size, 128, 0, {40, 33, 50});
  Workspace want = poisoned_workspace(KFormat::kFP8, 128, p.total, 0);
  FI_ASSERT_OK(gather_k_workspace(want.values.view(), want.scales.view(), p.cache.cache(),
                                  p.block_table.view(), p.cu_seq_lens.view()));
  const int32_t bad_pages[] = {-5, static_cast<int32_t>(p.cache.cache().num_pages), 1 << 30};
  const int64_t bad_request[] = {0, 1, 2};
  const int64_t bad_column[] = {1, 0, 3};
  for (int i = 0; i < 3; ++i) {
    p.block_table.at<int32_t>({bad_request[i], bad_column[i]}) = bad_pages[i];
    const int64_t begin = p.cu_seq_lens.data<int32_t>()[bad_request[i]];
    const int64_t end = p.cu_seq_lens.data<int32_t>()[bad_request[i] + 1];
    for (int64_t key = begin + bad_column[i] * page_size;
         key < std::min<int64_t>(end, begin + (bad_column[i] + 1) * page_size); ++key) {
      std::memset(want.values.bytes() + key * 128, kPoisonByte, 128);
      std::memset(want.scales.bytes() + key * 4, kPoisonByte, 4);
    }
  }
  const Workspace got = gather_on_gpu(p, KFormat::kFP8, 128, p.total, 0);
  ASSERT_TRUE(SameBytes(got.values, want.values));
  ASSERT_TRUE(SameBytes(got.scales, want.scales));
}

// A workspace shorter than cu_seq_lens[R] (an error on the CPU): the GPU writes its rows and
// nothing past them.
TEST(GatherKWorkspaceCuda, WorkspaceShorterThanTheLengthsIsFilledAndNotOverrun) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  GatherProblem p = make_gather(rng, KFormat::kMXFP4, 64, 128, 0, {100, 300});
  Workspace full = poisoned_workspace(KFormat::kMXFP4, 128, p.total, 0);
  FI_ASSERT_OK(gather_k_workspace(full.values.view(), full.scales.view(), p.cache.cache(),
                                  p.block_table.view(), p.cu_seq_lens.view()));
  const int64_t rows = 250;
  const Workspace got = gather_on_gpu(p, KFormat::kMXFP4, 128, rows, 0);
  ASSERT_EQ(std::memcmp(got.values.bytes(), full.values.bytes(), got.values.byte_size()), 0);
  ASSERT_EQ(std::memcmp(got.scales.bytes(), full.scales.bytes(), got.scales.byte_size()), 0);
}

// Insert then gather captured in one CUDA graph (no host synchronisation or allocation inside
// either op), replayed: the CPU's bytes.
TEST(InsertKCacheCuda, InsertAndGatherReplayFromACudaGraph) {
  SKIP_WITHOUT_GPU();
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    SCOPED_TRACE(kformat_name(format));
    const int page_size = 64;
    const int64_t pages = 6;
    const InsertCase c{format, DType::kBF16, DType::kI64, page_size, 128, 0, RopeStyle::kNeox};
    CacheBuffer want(format, pages, page_size, 128,
                     PagedKCache::page_bytes(format, page_size, 128));
    // Every slot once, in a shuffled order: the gather below then reads only written keys.
    InsertBatch b = make_batch(rng, c, pages * page_size, pages * page_size);
    std::vector<int64_t> order(static_cast<size_t>(pages * page_size));
    std::iota(order.begin(), order.end(), 0);
    rng.shuffle(order);
    for (int64_t i = 0; i < b.mapped; ++i) b.slots.data<int64_t>()[i] = order[i];
    FI_ASSERT_OK(insert_k_cache(want.cache(), b.keys.view(), b.slot_view(), b.insert));
    HostTensor table(DType::kI32, {2, 3});
    for (int i = 0; i < 6; ++i) table.data<int32_t>()[i] = 5 - i;
    const HostTensor cu = i32_tensor({0, 150, 320});
    Workspace want_ws = poisoned_workspace(format, 128, 320, 0);
    FI_ASSERT_OK(gather_k_workspace(want_ws.values.view(), want_ws.scales.view(), want.cache(),
                                    table.view(), cu.view()));

    CacheBuffer start(format, pages, page_size, 128,
                      PagedKCache::page_bytes(format, page_size, 128));
    DeviceCache cache = to_device(start);
    const DeviceTensor keys = to_device(b.keys), slots = to_device(b.slots);
    const DeviceTensor rope_table = to_device(b.table), positions = to_device(b.positions);
    const DeviceTensor device_table = to_device(table), device_cu = to_device(cu);
    Workspace got = poisoned_workspace(format, 128, 320, 0);
    DeviceTensor values = to_device(got.values), scales = to_device(got.scales);
    KeyInsertOptions insert = b.insert;
    insert.rope.cos_sin_cache = rope_table.view;
    insert.rope.positions = positions.view;
    TensorView slot_view = slots.view;
    slot_view.shape[0] = b.mapped;
    CapturedGraph graph;
    FI_ASSERT_OK(graph.capture([&](cudaStream_t stream) {
      RunOptions options;
      options.cuda_stream = stream;
      const Status inserted = insert_k_cache(cache.cache, keys.view, slot_view, insert, options);
      if (!inserted.ok()) return inserted;
      return gather_k_workspace(values.view, scales.view, cache.cache, device_table.view,
                                device_cu.view, options);
    }));
    ASSERT_EQ(graph.replay(3), cudaSuccess);
    std::vector<uint8_t> got_cache(static_cast<size_t>(want.total_bytes()));
    ASSERT_EQ(
        cudaMemcpy(got_cache.data(), cache.buffer.get(), got_cache.size(), cudaMemcpyDeviceToHost),
        cudaSuccess);
    ASSERT_EQ(std::memcmp(got_cache.data(), want.base(), got_cache.size()), 0);
    to_host(got.values, values);
    to_host(got.scales, scales);
    ASSERT_TRUE(SameBytes(got.values, want_ws.values));
    ASSERT_TRUE(SameBytes(got.scales, want_ws.scales));
  }
}

}  // namespace
}  // namespace fitest
