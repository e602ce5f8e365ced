// topk_cluster_kernel: the exact top-k of few long rows (decode), one thread-block cluster per row.
//
// The CTAs of a cluster cut the row into contiguous segments. Each draws the same sample of the
// whole row (so all compute the same threshold), streams its segment once and keeps its keys
// above the threshold in per-warp slices of its shared memory (segment_steps.cuh). CTA 0 then
// reads every CTA's survivors through distributed shared memory and selects the row's top-k
// among them: no workspace round trip and no second launch, unlike segment + merge. When fewer
// than min(k, length) keys passed, a slice overflowed or the survivors exceed CTA 0's gather
// buffer, CTA 0 selects over the row in global memory instead (exact, as everywhere). Rows of at
// most kBufferCapacity keys are selected by CTA 0 alone (direct path).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/topk/config.h"
#include "cuda/topk/launch.h"
#include "cuda/topk/segment_steps.cuh"
#include "cuda/topk/select_core.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::topk {
namespace {

namespace cg = cooperative_groups;

constexpr int kMaxClusterRanks = 8;    // the portable cluster size
constexpr int kGatherCapacity = 8192;  // survivors CTA 0 gathers (64 KiB)
constexpr int kSlices = kMaxClusterRanks * kWarps;

template <typename T>
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

  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int ranks = static_cast<int>(cluster.num_blocks());
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x;
  int64_t row_start;
  int64_t row_count;
  row_range(p, row, row_start, row_count);
  const uint32_t row_want = selected_count(row_count, p.k);
  const T* row_scores = static_cast<const T*>(p.logits) + row * p.logits_stride + row_start;
  // Uniform over the cluster: every CTA reads the same row length.
  const bool gated = row_count > kBufferCapacity;

  if (gated) {
    int64_t segment = (row_count + ranks - 1) / ranks;
    segment = (segment + 7) / 8 * 8;  // keeps segments' 16-byte alignment relative to the row
    const int64_t begin = rank * segment;
    int64_t n = row_count - begin;
    n = n < 0 ? 0 : (n > segment ? segment : n);
    // The segment's first loads go out before the sample's selection, which then hides their
    // latency.
    SegmentStream<T, Scores<T>::kClusterVectorsPerStep> stream;
    stream.begin(row_scores + begin, n);
    uint32_t threshold;
    uint32_t sample_max;
    sampled_threshold(row_scores, row_count, row_want, reinterpret_cast<uint32_t*>(buffer), hs,
                      threshold, sample_max);
    stream_survivors(stream, static_cast<uint32_t>(begin), threshold, sample_max, buffer, hs,
                     warp_counts);
    if (threadIdx.x == 0) {
      bool overflow = false;
      for (int w = 0; w < kWarps; ++w) overflow |= warp_counts[w] > kWarpSlice;
      failed = threshold == 0 || overflow;
    }
  } else if (threadIdx.x < kWarps) {
    warp_counts[threadIdx.x] = 0;
    if (threadIdx.x == 0) failed = 0;
  }
  cluster.sync();  // every CTA's slices, counts and flag are final

  if (rank == 0 && gated) {
    // Slice s = (rank r, warp w): its count, read remotely, then offsets by a block scan.
    const int slices = ranks * kWarps;
    uint32_t count = 0;
    bool remote_failed = false;
    if (static_cast<int>(threadIdx.x) < slices) {
      const int r = static_cast<int>(threadIdx.x) / kWarps;
      count = cluster.map_shared_rank(warp_counts, r)[threadIdx.x % kWarps];
      remote_failed = *cluster.map_shared_rank(&failed, r) != 0;
      slice_counts[threadIdx.x] = count;
    }
    const bool any_failed = __syncthreads_or(remote_failed) != 0;
    uint32_t total;
    const uint32_t offset = block_exclusive_scan(count, hs.scan, total);
    if (static_cast<int>(threadIdx.x) < slices) slice_offsets[threadIdx.x] = offset;
    if (threadIdx.x == 0) {
      gather_failed = any_failed || total < row_want || total > kGatherCapacity;
      slice_offsets[slices] = total;
    }
    __syncthreads();
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
  cluster.sync();  // CTA 0 has read the others' shared memory; they may exit
  if (rank != 0) return;

  uint32_t count;
  if (!gated) {
    count = select_direct(row_scores, row_count, row_want, 0u, buffer, selection, hs);
  } else if (gather_failed) {
    select_from_global(row_scores, row_count, row_want, 0u, selection, hs, &state);
    count = row_want;
  } else {
    const uint32_t total = slice_offsets[ranks * kWarps];
    const Candidates candidates{gather, dense_slice(total), nullptr, total};
    count =
        select_dense(candidates, row_want, reduce_warp_min(hs), reduce_warp_max(hs), selection, hs);
  }
  write_row(p, row, selection, count);
}

template <typename T>
cudaError_t launch_cluster(const Params& params, int64_t rows, int ranks, cudaStream_t stream) {
  const size_t shared =
      (kBufferCapacity + kGatherCapacity + static_cast<size_t>(selection_capacity(params.k))) *
      sizeof(uint64_t);
  const int most =
      (kBufferCapacity + kGatherCapacity + kMaxTopK) * static_cast<int>(sizeof(uint64_t));
  const cudaError_t configured = cudaFuncSetAttribute(
      topk_cluster_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
  if (configured != cudaSuccess) return configured;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(rows), static_cast<unsigned>(ranks), 1);
  config.blockDim = dim3(kThreads, 1, 1);
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = 1;
  attribute.val.clusterDim.y = static_cast<unsigned>(ranks);
  attribute.val.clusterDim.z = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, topk_cluster_kernel<T>, params);
}

}  // namespace

// One CTA per SM (the kernel's shared memory), so rows x ranks stays within one wave.
int cluster_ranks_for(int64_t rows, int sms) {
  int64_t ranks = rows > 0 ? sms / rows : 1;
  ranks = ranks < 1 ? 1 : (ranks > kMaxClusterRanks ? kMaxClusterRanks : ranks);
  return static_cast<int>(ranks);
}

cudaError_t launch_cluster_f32(const Params& params, int64_t rows, int ranks, cudaStream_t stream) {
  return launch_cluster<float>(params, rows, ranks, stream);
}

cudaError_t launch_cluster_bf16(const Params& params, int64_t rows, int ranks,
                                cudaStream_t stream) {
  return launch_cluster<uint16_t>(params, rows, ranks, stream);
}

}  // namespace flashindexer::cuda::topk
