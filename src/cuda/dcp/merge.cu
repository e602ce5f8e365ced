// SPDX-License-Identifier: Apache-2.0
// dcp_merge_kernel: the global top-k of every row from the gathered DCP candidates of N ranks.
//
// Shapes: gathered [rows, N k] i64 or [rows, N, k] i64 (any row and rank strides, e.g. the
// [N, rows, k] buffer of an ncclAllGather viewed as [rows, N, k]); out [rows, >= k] i32.
// k <= kMaxDcpTopK = 2048, any N.
//
// One CTA of 512 threads per row, in three steps:
//   1. Radix select over the row's N k keys, read from global memory (L2-resident after the
//      first pass): 8-bit digits from the top, at most 8 passes, stopping as soon as the boundary
//      bin is taken whole. Empty slots (key 0) are ignored. The histogram is counted with shared
//      atomics, which only add: the counts, and so every decision, do not depend on the order in
//      which the atomics are served.
//   2. Compaction in slot order: keys above the boundary, and the first `remaining` keys equal
//      to it (only possible with duplicate candidates), are written densely by two block scans
//      per tile of 2048 slots, so their positions never depend on scheduling.
//   3. A block radix sort (descending) of the <= 2048 selected keys, then the ids are decoded;
//      the zero keys padding the sort decode to -1, exactly the CPU's padding. Sorted output
//      sorts the whole keys (best first); unsorted output sorts their low 32 bits, ~id, so the
//      ids come out ascending (the zero keys still last).
// The output is therefore the CPU merge's bits in both orders.
//
// Why these sizes: 512 threads x 4 keys cover kMaxDcpTopK in one blocked sort; the sort's
// temporary storage (about 18 KiB) shares its shared memory with the 16 KiB selection buffer,
// which is read into registers before the sort starts; with the 1 KiB histogram the CTA stays
// well under the 48 KiB static limit, so several rows run per SM.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda/common/check.h"
#include "cuda/dcp/dcp.h"

namespace flashindexer::cuda {
namespace {

constexpr int kMergeThreads = 512;
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kSlotsPerThread = 4;  // consecutive slots per thread in a compaction tile
constexpr int kTileSlots = kMergeThreads * kSlotsPerThread;
constexpr int kSortKeysPerThread = 4;
constexpr int kSortCapacity = kMergeThreads * kSortKeysPerThread;
static_assert(kSortCapacity >= kMaxDcpTopK, "one blocked sort must hold the k selected keys");
static_assert(kBins <= kMergeThreads, "one thread per histogram bin in the boundary search");

struct MergeParams {
  const uint64_t* gathered;
  int64_t row_stride;   // elements between rows
  int64_t rank_stride;  // elements between rank blocks (k for [rows, N k])
  int32_t* out;
  int64_t out_stride;
  int k;
  int ranks;
  bool sorted;  // best first, else ascending id
};

__device__ __forceinline__ uint64_t load_candidate(const MergeParams& p, const uint64_t* row,
                                                   int64_t slot) {
  const int64_t rank = slot / p.k;
  return row[rank * p.rank_stride + (slot - rank * p.k)];
}

using Scan = cub::BlockScan<uint32_t, kMergeThreads>;
using Sort = cub::BlockRadixSort<uint64_t, kMergeThreads, kSortKeysPerThread>;

struct MergeShared {
  union {
    Sort::TempStorage sort;
    uint64_t selected[kSortCapacity];
  } keys;
  Scan::TempStorage scan;
  uint32_t histogram[kBins];
  uint32_t boundary_digit;
  uint32_t boundary_above;
  uint32_t boundary_count;
};

__global__ void __launch_bounds__(kMergeThreads)
    dcp_merge_kernel(const __grid_constant__ MergeParams p) {
  __shared__ MergeShared shared;
  const int64_t row = blockIdx.x;
  const uint64_t* candidates = p.gathered + row * p.row_stride;
  const int64_t slots = static_cast<int64_t>(p.ranks) * p.k;

  // Real candidates are nonzero; the row returns min(k, real) of them.
  uint32_t real = 0;
  for (int64_t slot = threadIdx.x; slot < slots; slot += kMergeThreads) {
    real += load_candidate(p, candidates, slot) != 0;
  }
  uint32_t real_total = 0;
  Scan(shared.scan).ExclusiveSum(real, real, real_total);
  __syncthreads();  // the scan storage is reused
  const uint32_t want = real_total < static_cast<uint32_t>(p.k) ? real_total : p.k;

  // 1. The keys to take: every key with (key & mask) > prefix, and `remaining` keys with
  // (key & mask) == prefix. Taking all real keys is prefix = mask = 0.
  uint64_t prefix = 0;
  uint64_t mask = 0;
  uint32_t remaining = want;
  if (want < real_total) {
    for (int shift = 64 - kDigitBits; shift >= 0; shift -= kDigitBits) {
      for (int bin = threadIdx.x; bin < kBins; bin += kMergeThreads) shared.histogram[bin] = 0;
      __syncthreads();
      for (int64_t slot = threadIdx.x; slot < slots; slot += kMergeThreads) {
        const uint64_t key = load_candidate(p, candidates, slot);
        if (key != 0 && (key & mask) == prefix) {
          atomicAdd(&shared.histogram[(key >> shift) & (kBins - 1)], 1u);
        }
      }
      __syncthreads();
      // Thread j looks at digit kBins - 1 - j: the exclusive sum counts the keys above it.
      const uint32_t digit = kBins - 1 - threadIdx.x;
      const uint32_t count = threadIdx.x < kBins ? shared.histogram[digit] : 0;
      uint32_t above = 0;
      Scan(shared.scan).ExclusiveSum(count, above);
      if (threadIdx.x < kBins && above < remaining && above + count >= remaining) {
        shared.boundary_digit = digit;
        shared.boundary_above = above;
        shared.boundary_count = count;
      }
      __syncthreads();
      prefix |= static_cast<uint64_t>(shared.boundary_digit) << shift;
      mask |= static_cast<uint64_t>(kBins - 1) << shift;
      remaining -= shared.boundary_above;
      if (remaining == shared.boundary_count) break;  // the boundary bin is taken whole
    }
  }

  // 2. Dense copy of the selected keys, in slot order.
  uint32_t taken_before = 0;
  uint32_t equal_before = 0;
  for (int64_t tile = 0; tile < slots; tile += kTileSlots) {
    const int64_t first = tile + static_cast<int64_t>(threadIdx.x) * kSlotsPerThread;
    uint64_t keys[kSlotsPerThread];
    bool is_above[kSlotsPerThread];
    bool is_equal[kSlotsPerThread];
    uint32_t equal = 0;
#pragma unroll
    for (int j = 0; j < kSlotsPerThread; ++j) {
      keys[j] = first + j < slots ? load_candidate(p, candidates, first + j) : 0;
      is_above[j] = keys[j] != 0 && (keys[j] & mask) > prefix;
      is_equal[j] = keys[j] != 0 && (keys[j] & mask) == prefix;
      equal += is_equal[j];
    }
    uint32_t equal_rank = 0;
    uint32_t equal_total = 0;
    Scan(shared.scan).ExclusiveSum(equal, equal_rank, equal_total);
    equal_rank += equal_before;
    bool take[kSlotsPerThread];
    uint32_t taken = 0;
#pragma unroll
    for (int j = 0; j < kSlotsPerThread; ++j) {
      take[j] = is_above[j] || (is_equal[j] && equal_rank < remaining);
      equal_rank += is_equal[j];
      taken += take[j];
    }
    __syncthreads();  // the scan storage is reused
    uint32_t position = 0;
    uint32_t taken_total = 0;
    Scan(shared.scan).ExclusiveSum(taken, position, taken_total);
    position += taken_before;
#pragma unroll
    for (int j = 0; j < kSlotsPerThread; ++j) {
      if (take[j]) shared.keys.selected[position++] = keys[j];
    }
    taken_before += taken_total;
    equal_before += equal_total;
    __syncthreads();
  }

  // 3. Sort the selected keys best first, or by ~id for ascending ids (zero keys pad the tail
  // either way), and decode their ids.
  uint64_t sorted_keys[kSortKeysPerThread];
#pragma unroll
  for (int j = 0; j < kSortKeysPerThread; ++j) {
    const uint32_t index = threadIdx.x * kSortKeysPerThread + j;
    sorted_keys[j] = index < want ? shared.keys.selected[index] : 0;
  }
  __syncthreads();  // the selection buffer becomes the sort's storage
  if (p.sorted) {
    Sort(shared.keys.sort).SortDescending(sorted_keys);
  } else {
    Sort(shared.keys.sort).SortDescending(sorted_keys, 0, 32);
  }
  int32_t* out = p.out + row * p.out_stride;
#pragma unroll
  for (int j = 0; j < kSortKeysPerThread; ++j) {
    const int index = threadIdx.x * kSortKeysPerThread + j;
    // ~low32 is the global id; the zero key decodes to ~0 = -1.
    if (index < p.k) out[index] = static_cast<int32_t>(~static_cast<uint32_t>(sorted_keys[j]));
  }
}

}  // namespace

Status dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                      bool sorted, void* stream) {
  MergeParams p{};
  p.gathered = gathered.ptr<uint64_t>();
  p.row_stride = gathered.stride[0];
  p.rank_stride = gathered.rank == 3 ? gathered.stride[1] : k;
  p.out = out.ptr<int32_t>();
  p.out_stride = out.stride[0];
  p.k = k;
  p.ranks = ranks;
  p.sorted = sorted;
  const int64_t rows = out.shape[0];
  if (rows == 0) return Status::Ok();
  if (rows > INT32_MAX) {
    return Status::InvalidArgument(
        concat("dcp_merge_topk: out has ", rows, " rows, expected at most ", INT32_MAX));
  }
  dcp_merge_kernel<<<static_cast<unsigned>(rows), kMergeThreads, 0,
                     static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("dcp_merge_topk");
}

}  // namespace flashindexer::cuda
