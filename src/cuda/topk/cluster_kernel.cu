// SPDX-License-Identifier: Apache-2.0
// topk_cluster_kernel: the exact top-k of few long rows (decode), one thread-block cluster per row.
//
// The CTAs of a cluster cut the row into contiguous segments. Each draws the same sample of the
// whole row (so all compute the same threshold), streams its segment once and keeps its keys
// above the threshold in per-warp slices of its shared memory, counted in a histogram whose bins
// are the same in every CTA (segment_steps.cuh). Every CTA then sums the CTAs' histograms
// through distributed shared memory and finds the same boundary bin for k. When that bin holds
// few keys (or is taken whole), the CTAs agree on the exact cutoff and each writes its own
// selected keys to its place in the row (select_in_cluster): nothing is gathered. Otherwise CTA 0
// gathers every CTA's survivors and selects among them; and when fewer than min(k, length) keys
// passed, a slice overflowed or the survivors exceed CTA 0's gather buffer, CTA 0 selects over
// the row in global memory instead (exact, as everywhere). Rows of at most kBufferCapacity keys
// are selected by CTA 0 alone (direct path).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "cuda/common/device.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/topk/config.h"
#include "cuda/topk/histogram_select.cuh"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/params.h"
#include "cuda/topk/radix_select.cuh"
#include "cuda/topk/segment_steps.cuh"
#include "cuda/topk/write_rows.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxClusterRanks = 8;    // the portable cluster size
constexpr int kGatherCapacity = 8192;  // survivors CTA 0 gathers (64 KiB)
constexpr int kSlices = kMaxClusterRanks * kWarps;

constexpr int kCoarseBins = 64;  // the survivor histogram in sums of 32 bins, one per lane
constexpr int kBinsPerCoarse = kHistBins / kCoarseBins;
static_assert(kBinsPerCoarse == 32 && kCoarseBins == 64, "find_cluster_boundary's warp layout");

// The sum over the cluster's CTAs of the word at `local` in each (a shared address of this CTA):
// every CTA's load is issued before any is used, one round trip (a loop adding each load before
// issuing the next made 1 row x 131072 19.5 us against 17.1).
__device__ __forceinline__ uint32_t cluster_sum(const uint32_t* local,
                                                const cg::cluster_group& cluster) {
  const int ranks = static_cast<int>(cluster.num_blocks());
  uint32_t values[kMaxClusterRanks];
#pragma unroll
  for (int r = 0; r < kMaxClusterRanks; ++r) {
    values[r] = r < ranks ? *cluster.map_shared_rank(local, r) : 0u;
  }
  uint32_t sum = 0;
#pragma unroll
  for (int r = 0; r < kMaxClusterRanks; ++r) sum += values[r];
  return sum;
}

// Whether the cluster's selection of a gated row can be done by select_in_cluster, and if so its
// boundary bin for row_want in hs (boundary_bin, above, in_bin): the bin of the cluster's
// survivor histogram (the sum of the CTAs', whose bins are the same: one threshold, one sample
// maximum) that holds the row_want-th key. Warp 0 reads the CTAs' 64 coarse sums, then the 32
// bins of the boundary's coarse bin, through distributed shared memory: summing whole histograms
// put every CTA's 8 KiB through every other SM (1 row x 131072: 21 -> 30 us). Not when a CTA
// failed (threshold, slice overflow) or fewer than row_want keys survived, nor when the boundary
// bin holds more than kBruteForceMax keys of which only some are wanted. any_failed (shared):
// whether some CTA failed. Contains a barrier.
__device__ bool find_cluster_boundary(const uint32_t* coarse, const int& failed, uint32_t row_want,
                                      HistShared& hs, int& any_failed,
                                      const cg::cluster_group& cluster) {
  __shared__ int in_cluster;
  const int lane = threadIdx.x & 31;
  if (threadIdx.x < 32) {
    const int ranks = static_cast<int>(cluster.num_blocks());
    // Lane l: coarse bins 63 - 2l and 62 - 2l (the scan runs from the top bin down).
    const uint32_t high = cluster_sum(&coarse[kCoarseBins - 1 - 2 * lane], cluster);
    const uint32_t low = cluster_sum(&coarse[kCoarseBins - 2 - 2 * lane], cluster);
    const bool some_failed =
        __any_sync(0xffffffffu, lane < ranks && *cluster.map_shared_rank(&failed, lane) != 0);
    if (lane == 0) any_failed = some_failed;
    const uint32_t pair = high + low;
    const uint32_t inclusive = warp_inclusive_scan(pair);
    const uint32_t total = __shfl_sync(0xffffffffu, inclusive, 31);
    if (!some_failed && total >= row_want) {
      // The coarse bin that holds the row_want-th key, and the keys above it.
      const uint32_t exclusive = inclusive - pair;
      const bool holds = exclusive < row_want && row_want <= inclusive;
      const int holder = __ffs(__ballot_sync(0xffffffffu, holds)) - 1;
      const bool in_high = exclusive + high >= row_want;
      int coarse_bin = in_high ? kCoarseBins - 1 - 2 * lane : kCoarseBins - 2 - 2 * lane;
      uint32_t above = in_high ? exclusive : exclusive + high;
      coarse_bin = __shfl_sync(0xffffffffu, coarse_bin, holder);
      above = __shfl_sync(0xffffffffu, above, holder);
      // Its 32 bins, lane l the (31 - l)-th.
      const int bin = coarse_bin * kBinsPerCoarse + kBinsPerCoarse - 1 - lane;
      const uint32_t count = cluster_sum(&hs.bins[bin], cluster);
      const uint32_t bin_inclusive = above + warp_inclusive_scan(count);
      const uint32_t bin_exclusive = bin_inclusive - count;
      if (bin_exclusive < row_want && row_want <= bin_inclusive) {
        hs.boundary_bin = static_cast<uint32_t>(bin);
        hs.above = bin_exclusive;
        hs.in_bin = count;
        // A bin taken whole needs no cutoff search.
        in_cluster = count <= kBruteForceMax || row_want - bin_exclusive == count;
      }
    } else if (lane == 0) {
      in_cluster = 0;
    }
  }
  __syncthreads();
  return in_cluster != 0;
}

// What a CTA publishes to the others for select_in_cluster (keys, count, above), and its own
// per-rank tallies.
struct ClusterShare {
  uint64_t keys[kBruteForceMax];  // this CTA's survivors in the boundary bin (unless taken whole)
  uint32_t count;                 // this CTA's survivors in the boundary bin
  uint32_t above;                 // this CTA's survivors above it
  uint32_t rank_above[kMaxClusterRanks];   // per rank: its `above`
  uint32_t rank_in_bin[kMaxClusterRanks];  // per rank: its `count` (bin not taken whole)
  uint32_t rank_ties[kMaxClusterRanks];    // per rank: its boundary-bin keys >= the cutoff
  uint8_t gathered_rank[kBruteForceMax];   // the rank of hs.gather[i]
  uint8_t key_warp[kBruteForceMax];        // the warp whose slice held keys[i]
  uint32_t warp_taken[kWarps];             // per warp of this CTA: its survivors >= the cutoff
};

// Clusters of at least this many CTAs take the sample's coarse threshold (sample_threshold,
// coarse_ok): one histogram round less for up to twice the survivors, spread over the CTAs.
// Measured (H200, k = 2048, 131072 keys, L2 flushed): 1 row (8 CTAs) 17.0 -> 15.1 us; 64 rows
// (2 CTAs each) 27.1 -> 27.4 us and 128 rows (1 CTA) 37.6 -> 38.6 us with it, so not there.
constexpr int kMinRanksForCoarseThreshold = 4;

// Sorted answers of clusters of at least this many CTAs are sorted by every CTA
// (write_sorted_in_cluster), of fewer by CTA 0. Measured (H200, k = 2048, 131072 keys): 1 row
// (8 CTAs) 31 -> 23.5 us; 64 rows (2 CTAs each) 39.7 -> 41.5 us, where sorting 1024 keys per CTA
// costs about as much as sorting 2048 in one and the searches come on top. From 4 to 6 ranks
// CTA 0 sorts faster too: the sorted dense indexer (H64, 32768 / 131072 keys, with SMs / rows
// CTAs per row) at 20 rows (6 ranks) 61 -> 59 / 136 -> 134 us, 24 rows (5) 67 -> 64 / 155 ->
// 151, 32 rows (4) 83 -> 74 / 197 -> 188 (docs/history/).
constexpr int kMinRanksSortingPerCta = 8;

// The sorted answer of select_in_cluster: each CTA sorts its own selected keys (into `sorted`),
// copies the other CTAs' sorted lists into `copies` (its survivors' buffer, free by then: one
// round trip through distributed shared memory), and writes each of its keys at its rank in the
// row: its place in its own list plus the keys above it in each other list (binary searches in
// shared memory). Sorting the whole row in CTA 0 instead was one CTA's work: 1 x 131072,
// k = 2048 took 28 us sorted against 15 unsorted (H200). share.rank_above / rank_ties hold every
// CTA's count. Contains cluster barriers.
__device__ void write_sorted_in_cluster(const Params& p, int64_t row, uint32_t row_want,
                                        const Candidates& own, uint64_t cutoff, uint64_t* selection,
                                        uint64_t* sorted, uint64_t* copies, HistShared& hs,
                                        const ClusterShare& share,
                                        const cg::cluster_group& cluster) {
  const int rank = static_cast<int>(cluster.block_rank());
  const int ranks = static_cast<int>(cluster.num_blocks());
  const uint32_t mine = compact_cutoff(own, cutoff, selection, hs.scan);
  sort_selection_descending(selection, mine, [&](int i, uint64_t key) { sorted[i] = key; });
  // The other lists side by side in `copies`: list r at [starts[r], starts[r + 1]) (own: empty).
  uint32_t starts[kMaxClusterRanks + 1];
  starts[0] = 0;
#pragma unroll
  for (int r = 0; r < kMaxClusterRanks; ++r) {
    const bool other = r < ranks && r != rank;
    starts[r + 1] = starts[r] + (other ? share.rank_above[r] + share.rank_ties[r] : 0u);
  }
  const uint32_t others = starts[kMaxClusterRanks];
  cluster.sync();                                            // every CTA's sorted list is complete
  constexpr int kCopiesPerThread = kClusterMaxK / kThreads;  // others < row_want <= k
  static_assert(kCopiesPerThread * kThreads == kClusterMaxK, "copies of the other lists");
  uint64_t copied[kCopiesPerThread];
#pragma unroll
  for (int u = 0; u < kCopiesPerThread; ++u) {
    const uint32_t g = threadIdx.x + u * kThreads;
    int holder = 0;  // the list g falls in: the last whose start is <= g (empty ones end there)
#pragma unroll
    for (int r = 1; r < kMaxClusterRanks; ++r) holder = g >= starts[r] ? r : holder;
    uint32_t first = 0;
#pragma unroll
    for (int r = 1; r < kMaxClusterRanks; ++r) first = holder == r ? starts[r] : first;
    copied[u] = g < others ? cluster.map_shared_rank(sorted, holder)[g - first] : 0;
  }
  // This CTA's reads of the others' shared memory are done: they may exit once all have arrived.
  cg::cluster_group::arrival_token arrived = cluster.barrier_arrive();
#pragma unroll
  for (int u = 0; u < kCopiesPerThread; ++u) {
    const uint32_t g = threadIdx.x + u * kThreads;
    if (g < others) copies[g] = copied[u];
  }
  uint32_t top_step = 1;
#pragma unroll
  for (int r = 0; r < kMaxClusterRanks; ++r) {
    while (top_step < starts[r + 1] - starts[r]) top_step <<= 1;
  }
  __syncthreads();
  int32_t* out = p.out + row * p.out_stride0;
  for (uint32_t j = threadIdx.x; j < mine; j += kThreads) {
    const uint64_t key = sorted[j];
    uint32_t above[kMaxClusterRanks] = {};  // keys of list r above `key` (keys are distinct)
    for (uint32_t step = top_step; step > 0; step >>= 1) {
#pragma unroll
      for (int r = 0; r < kMaxClusterRanks; ++r) {
        const uint32_t probe = above[r] + step;
        if (probe <= starts[r + 1] - starts[r] && copies[starts[r] + probe - 1] > key) {
          above[r] = probe;
        }
      }
    }
    uint32_t place = j;
#pragma unroll
    for (int r = 0; r < kMaxClusterRanks; ++r) place += above[r];
    out[place * p.out_stride1] = rank_key_index(key);
  }
  if (rank == 0) write_padding(p, out, row_want);
  cluster.barrier_wait(std::move(arrived));
}

// The selection of a gated row when the cluster's boundary bin (hs, from the summed survivor
// histograms) holds <= kBruteForceMax keys or is taken whole, the common case: no CTA gathers
// the survivors. Each CTA counts its survivors above the boundary bin and keeps those in it;
// after one cluster barrier every CTA reads the boundary keys of all, finds the same cutoff and
// writes its own survivors >= cutoff to its place in the row's answer, after the CTAs before it,
// in ascending index order (its slices' order). Sorted answers:
// write_sorted_in_cluster, or, in small clusters, pushed into CTA 0's selection, which sorts and
// writes them. Contains cluster barriers: call from every thread of every CTA.
__device__ void select_in_cluster(const Params& p, int64_t row, uint32_t threshold,
                                  uint32_t sample_max, uint32_t row_want, uint64_t* buffer,
                                  const uint32_t* warp_counts, uint64_t* selection,
                                  uint64_t* sorted, HistShared& hs, ClusterShare& share,
                                  const cg::cluster_group& cluster) {
  const int rank = static_cast<int>(cluster.block_rank());
  const int ranks = static_cast<int>(cluster.num_blocks());
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const uint32_t boundary = hs.boundary_bin;
  const uint32_t in_bin = hs.in_bin;
  const uint32_t remaining = row_want - hs.above;
  const bool whole_bin = remaining == in_bin;
  const uint64_t lo = static_cast<uint64_t>(threshold) << 32;
  const int shift = survivor_histogram_shift(threshold, sample_max);  // the streamed bins'
  if (threadIdx.x == 0) {
    share.count = 0;
    share.above = 0;
  }
  __syncthreads();
  const uint64_t* slice = buffer + warp * kWarpSlice;
  const uint32_t mine = warp_counts[warp];
  uint32_t above = 0;
  uint32_t in_boundary = 0;
  for (uint32_t i = lane; i < mine; i += 32) {
    const uint64_t key = slice[i];
    const uint32_t bin = hist_bin(key, lo, shift);
    above += bin > boundary ? 1u : 0u;
    if (bin == boundary) {
      ++in_boundary;
      const uint32_t at = atomicAdd(&share.count, 1u);
      if (!whole_bin) {
        share.keys[at] = key;
        share.key_warp[at] = static_cast<uint8_t>(warp);
      }
    }
  }
  above = __reduce_add_sync(0xffffffffu, above);
  in_boundary = __reduce_add_sync(0xffffffffu, in_boundary);
  if (lane == 0) {
    if (above > 0) atomicAdd(&share.above, above);
    // Per warp, what the unsorted answer takes: the keys above the boundary bin, and its keys in
    // it when it is taken whole (else those >= the cutoff are added once it is known).
    share.warp_taken[warp] = above + (whole_bin ? in_boundary : 0u);
  }
  cluster.sync();  // every CTA's share is final

  if (static_cast<int>(threadIdx.x) < ranks) {
    const ClusterShare& remote = *cluster.map_shared_rank(&share, static_cast<int>(threadIdx.x));
    share.rank_above[threadIdx.x] = remote.above;
    share.rank_ties[threadIdx.x] = whole_bin ? remote.count : 0u;
    share.rank_in_bin[threadIdx.x] = whole_bin ? 0u : remote.count;
  }
  __syncthreads();
  if (!whole_bin) {
    // Every CTA's boundary keys into hs.gather, rank by rank: one remote load per thread.
    for (uint32_t i = threadIdx.x; i < in_bin; i += kThreads) {
      int r = 0;
      uint32_t first = 0;  // hs.gather index of rank r's first key
      while (first + share.rank_in_bin[r] <= i) first += share.rank_in_bin[r++];
      hs.gather[i] = cluster.map_shared_rank(share.keys, r)[i - first];
      share.gathered_rank[i] = static_cast<uint8_t>(r);
    }
  }
  __syncthreads();
  uint64_t cutoff = lo + (static_cast<uint64_t>(boundary) << shift);  // the bin's lowest key
  if (!whole_bin) {
    cutoff = brute_force_cutoff(hs, in_bin, remaining);
    for (uint32_t i = threadIdx.x; i < in_bin; i += kThreads) {
      if (hs.gather[i] >= cutoff) atomicAdd(&share.rank_ties[share.gathered_rank[i]], 1u);
    }
    for (uint32_t i = threadIdx.x; i < share.count; i += kThreads) {
      if (share.keys[i] >= cutoff) atomicAdd(&share.warp_taken[share.key_warp[i]], 1u);
    }
    __syncthreads();
  }
  const Candidates own{buffer, kWarpSlice, warp_counts, 0};
  if (p.sorted && ranks >= kMinRanksSortingPerCta) {
    write_sorted_in_cluster(p, row, row_want, own, cutoff, selection, sorted, buffer, hs, share,
                            cluster);
    return;
  }
  uint32_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += share.rank_above[r] + share.rank_ties[r];
  if (p.sorted) {  // few CTAs: CTA 0 sorts the row
    compact_cutoff(own, cutoff, cluster.map_shared_rank(selection, 0) + offset, hs.scan);
    cluster.sync();  // CTA 0's selection is complete; no CTA reads another's memory any more
    if (rank == 0) write_row(p, row, selection, row_want);
    return;
  }
  // This CTA's reads of the others' shared memory are done (each value was stored into its own
  // before the barriers above): they may exit once all have arrived. Nothing is published, so
  // the arrival needs no release fence.
  ptx::cluster_arrive_relaxed();
  // Its selected keys, straight from its slices (in index order) to its place in the answer,
  // after the CTAs before it.
  int32_t* out = p.out + row * p.out_stride0;
  place_taken_indices(own, cutoff, share.warp_taken, out, p.out_stride1, offset);
  if (rank == 0) write_padding(p, out, row_want);
  ptx::cluster_wait();
}

template <typename T, EmptyRows kEmptyRows>
__global__ void __launch_bounds__(kThreads, 1)
    topk_cluster_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint64_t shared_keys[];
  uint64_t* buffer = shared_keys;                    // [kBufferCapacity]: slices
  uint64_t* gather = shared_keys + kBufferCapacity;  // [kGatherCapacity]: CTA 0's
  uint64_t* selection = gather + kGatherCapacity;    // [selection_capacity(k)]
  __shared__ HistShared hs;
  __shared__ SelectState state;
  __shared__ uint32_t warp_counts[kWarps];
  __shared__ int failed;  // this CTA's threshold or slices failed
  __shared__ uint32_t slice_offsets[kSlices + 1];
  __shared__ uint32_t slice_counts[kSlices];
  __shared__ int gather_failed;
  __shared__ ClusterShare share;
  __shared__ uint32_t coarse[kCoarseBins];  // coarse[c]: hs.bins[32 c, 32 c + 32) summed

  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int ranks = static_cast<int>(cluster.num_blocks());
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x;
  int64_t row_start;
  int64_t row_count;
  row_range(p, row, row_start, row_count);
  // Uniform over the cluster: every CTA reads the same row length (no CTA has reached a
  // cluster barrier yet).
  if (kEmptyRows == EmptyRows::kLeave && row_count == 0) return;
  const uint32_t row_want = selected_count(row_count, p.k);
  const T* row_scores = static_cast<const T*>(p.logits) + row * p.logits_stride + row_start;
  const bool gated = row_count > kBufferCapacity;
  uint32_t threshold = 0;
  uint32_t sample_max = 0;

  int64_t begin = 0;  // this CTA's segment of a gated row: n keys from begin
  int64_t n = 0;
  if (gated) {
    int64_t segment = (row_count + ranks - 1) / ranks;
    segment = (segment + 7) / 8 * 8;  // keeps segments' 16-byte alignment relative to the row
    begin = rank * segment;
    n = row_count - begin;
    n = n < 0 ? 0 : (n > segment ? segment : n);
    // The segment's first loads go out before the sample's, and its next steps are asked into
    // L2 once the sample has arrived: the memory system is otherwise idle while the sample is
    // selected (kClusterPrefetchSteps). Asking the whole segment into L2 before the sample, with
    // prefetch.global.L2, made the sample slower (64 x 131072 30.4 -> 33.4 us).
    SegmentStream<T, Scores<T>::kVectorsPerStep> stream;
    stream.begin(row_scores + begin, n);
    sampled_threshold(row_scores, row_count, row_want, ranks >= kMinRanksForCoarseThreshold,
                      reinterpret_cast<uint32_t*>(buffer), hs, threshold, sample_max,
                      [&] { stream.prefetch_to_l2(kClusterPrefetchSteps); });
    stream_survivors(stream, static_cast<uint32_t>(begin), threshold, sample_max, buffer, hs,
                     warp_counts);
    if (threadIdx.x == 0) {
      bool overflow = false;
      for (int w = 0; w < kWarps; ++w) overflow |= warp_counts[w] > kWarpSlice;
      failed = threshold == 0 || overflow;
    }
    // The coarse histogram the other CTAs read first (find_cluster_boundary).
    for (int c = warp; c < kCoarseBins; c += kWarps) {
      const uint32_t sum = __reduce_add_sync(0xffffffffu, hs.bins[c * kBinsPerCoarse + lane]);
      if (lane == 0) coarse[c] = sum;
    }
  } else if (threadIdx.x < kWarps) {
    warp_counts[threadIdx.x] = 0;
    if (threadIdx.x == 0) failed = 0;
  }
  cluster.sync();  // every CTA's slices, counts, flag and histogram are final

  if (gated) {
    // Uniform over the cluster, like everything it depends on.
    __shared__ int any_failed;  // some CTA's threshold or slices failed
    const bool in_cluster =
        find_cluster_boundary(coarse, failed, row_want, hs, any_failed, cluster);
    if (in_cluster) {
      select_in_cluster(p, row, threshold, sample_max, row_want, buffer, warp_counts, selection,
                        gather, hs, share, cluster);
      return;
    }
    // Slice s = (rank r, warp w): its count, read remotely, then offsets by a block scan.
    const int slices = ranks * kWarps;
    uint32_t count = 0;
    if (static_cast<int>(threadIdx.x) < slices) {
      const int r = static_cast<int>(threadIdx.x) / kWarps;
      count = cluster.map_shared_rank(warp_counts, r)[threadIdx.x % kWarps];
      slice_counts[threadIdx.x] = count;
    }
    uint32_t total;
    const uint32_t offset = block_exclusive_scan(count, hs.scan, total);
    if (static_cast<int>(threadIdx.x) < slices) slice_offsets[threadIdx.x] = offset;
    if (threadIdx.x == 0) {
      gather_failed = any_failed != 0 || total < row_want || total > kGatherCapacity;
      slice_offsets[slices] = total;
    }
    __syncthreads();  // slice offsets and gather_failed
    if (rank == 0) {
      // Warp w copies slices w, w + 16, ... with its lanes (coalesced remote reads).
      uint32_t lowest = 0xffffffffu;
      uint32_t highest = 0;
      if (!gather_failed) {
        for (int s = warp; s < slices; s += kWarps) {
          const uint64_t* remote =
              cluster.map_shared_rank(buffer, s / kWarps) + (s % kWarps) * kWarpSlice;
          const uint32_t n = slice_counts[s];
          for (uint32_t i = lane; i < n; i += 32) {
            const uint64_t key = remote[i];
            gather[slice_offsets[s] + i] = key;
            const uint32_t score = static_cast<uint32_t>(key >> 32);
            lowest = lowest < score ? lowest : score;
            highest = highest > score ? highest : score;
          }
        }
      }
      lowest = __reduce_min_sync(0xffffffffu, lowest);
      highest = __reduce_max_sync(0xffffffffu, highest);
      if (lane == 0) {
        hs.warp_min[warp] = lowest;
        hs.warp_max[warp] = highest;
      }
    }
  }
  cluster.sync();  // CTA 0 has read the others' shared memory; they may exit
  if (rank != 0) return;

  if (!gated) {  // the direct path's selection is in index order
    write_row(p, row, selection,
              select_direct(row_scores, row_count, row_want, 0u, buffer, selection, hs));
    return;
  }
  if (!gather_failed) {  // the gathered slices, and so the selection, are in index order
    const uint32_t total = slice_offsets[ranks * kWarps];
    const Candidates candidates{gather, dense_slice(total), nullptr, total};
    write_row(p, row, selection,
              select_dense(candidates, row_want, reduce_warp_min(hs), reduce_warp_max(hs),
                           selection, hs));
    return;
  }
  select_from_global(row_scores, row_count, row_want, 0u, selection, hs, &state);
  // The buffer (CTA 0's slices, gathered) is free: the bitmap of the unsorted answer.
  write_row_from_any_order(p, row, selection, row_want, row_count,
                           reinterpret_cast<uint32_t*>(buffer), kBufferCapacity * 2, hs.scan);
}

// The cluster kernel's dynamic shared memory: the most any k takes, so that the occupancy
// queries hold for every k (one CTA per SM at any k).
constexpr int kMostClusterShared =
    (kBufferCapacity + kGatherCapacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));

template <typename T, EmptyRows kEmptyRows>
cudaError_t configure_cluster_kernel() {
  return cudaFuncSetAttribute(topk_cluster_kernel<T, kEmptyRows>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, kMostClusterShared);
}

constexpr int kMaxDevices = 64;

// Clusters of `ranks` CTAs of the kernel that the current device holds at once, cached per
// device (INT_MAX when it cannot be asked). A cluster's CTAs share one GPC, so fewer clusters
// fit than SMs / ranks: on the H200 (132 SMs, one CTA per SM) 132, 66, 39, 30, 22, 17, 15, 15
// clusters of 1 to 8 CTAs. Call after configure_cluster_kernel<T, kEmptyRows>().
template <typename T, EmptyRows kEmptyRows>
int max_active_clusters(int ranks) {
  static std::atomic<int> cached[kMaxDevices][kMaxClusterRanks + 1] = {};  // count + 1; 0: unknown
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return INT_MAX;
  }
  std::atomic<int>* slot = device >= 0 && device < kMaxDevices ? &cached[device][ranks] : nullptr;
  if (slot != nullptr) {
    if (const int known = slot->load(std::memory_order_relaxed); known > 0) return known - 1;
  }
  int clusters = 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(ranks), 1, 1);
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kMostClusterShared;
  cudaLaunchAttribute cluster;
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = static_cast<unsigned>(ranks);
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  if (cudaOccupancyMaxActiveClusters(&clusters, topk_cluster_kernel<T, kEmptyRows>, &config) !=
      cudaSuccess) {
    cudaGetLastError();
    return INT_MAX;
  }
  if (slot != nullptr) slot->store(clusters + 1, std::memory_order_relaxed);
  return clusters;
}

// CTAs per row: SMs / rows (at most 8), fewer when the GPU cannot hold that many clusters of that
// size at once. A second wave of clusters cost more than fewer CTAs per row saved (H200, 131072
// keys, k = 2048: 16 rows of 8 CTAs 19.7 us, 14 rows 11.2; 32 rows of 4 23.7, 30 rows 13.6;
// docs/history/).
template <typename T, EmptyRows kEmptyRows>
int cluster_ranks(int64_t rows, int sms) {
  int64_t ranks = rows > 0 ? sms / rows : 1;
  ranks = ranks < 1 ? 1 : (ranks > kMaxClusterRanks ? kMaxClusterRanks : ranks);
  while (ranks > 1 && max_active_clusters<T, kEmptyRows>(static_cast<int>(ranks)) < rows) --ranks;
  return static_cast<int>(ranks);
}

template <typename T, EmptyRows kEmptyRows>
cudaError_t launch_cluster(const Params& params, int64_t rows, cudaStream_t stream) {
  const size_t shared =
      (kBufferCapacity + kGatherCapacity + static_cast<size_t>(selection_capacity(params.k))) *
      sizeof(uint64_t);
  const cudaError_t configured = configure_cluster_kernel<T, kEmptyRows>();
  if (configured != cudaSuccess) return configured;
  const int ranks = cluster_ranks<T, kEmptyRows>(rows, multiprocessor_count());
  return launch_dependent(topk_cluster_kernel<T, kEmptyRows>,
                          dim3(static_cast<unsigned>(rows), static_cast<unsigned>(ranks), 1),
                          dim3(kThreads), shared, stream, static_cast<unsigned>(ranks), params);
}

}  // namespace

cudaError_t launch_cluster(const Params& params, int64_t rows, bool bf16, EmptyRows empty_rows,
                           cudaStream_t stream) {
  if (empty_rows == EmptyRows::kLeave) {  // the fused indexer's fallback: fp32 logits only
    return bf16 ? cudaErrorNotSupported
                : launch_cluster<float, EmptyRows::kLeave>(params, rows, stream);
  }
  return bf16 ? launch_cluster<uint16_t, EmptyRows::kWrite>(params, rows, stream)
              : launch_cluster<float, EmptyRows::kWrite>(params, rows, stream);
}

}  // namespace flashindexer::cuda::topk
