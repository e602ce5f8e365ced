// SPDX-License-Identifier: Apache-2.0
// Compile-time tile sizes of the GPU top-k (src/cuda/topk/). Every number has its reason here.
#pragma once

#include <cstdint>

namespace flashindexer::cuda::topk {

// 512 threads per CTA and 2 CTAs per SM: 16 warps x 2 keep enough 16-byte loads in flight
// (4 per thread -> 64 KiB per SM, about twice the bandwidth-latency product of one SM's share
// of HBM), and __launch_bounds__(512, 2) leaves 64 registers per thread, which the streaming
// loop needs without spilling.
constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kMinCtasPerSm = 2;

// 16-byte vectors per thread per streaming step (4 fp32 or 8 bf16 values each). The loop loads
// the next step before processing the current one, so two steps are in flight: fp32 4 vectors
// (128 B per thread, 128 KiB per SM at 2 CTAs, > the ~65 KiB that 4.3 TB/s x ~2 us needs);
// bf16 2 vectors (16 values, as many as fp32's 4): more bf16 values per step spill at the
// 64-register cap of 2 CTAs x 512 threads. The cluster kernel (1 CTA per SM) takes the same
// steps: twice the loads per step there (8 fp32 vectors, four pairs per lane in index order) ran
// decode 64 x 131072 k = 2048 in 26.3 us against 25.0 (H200).
constexpr int kFloatVectorsPerStep = 4;
constexpr int kBf16VectorsPerStep = 2;

// Steps of each warp (after its first, loaded before the sample) that the cluster kernel asks
// into L2 while it selects the sample's threshold, when the memory system is otherwise idle.
// Measured (H200, k = 2048, 131072 keys, L2 flushed, builds alternated, six runs): 64 rows
// 24.3-24.9 -> 23.7-24.3 us, 128 rows 34.8-35.6 -> 34.2-35.1 us, 1 row within 0.2 us. 2 to 4
// steps gain alike; the whole segment (7 steps at 64 rows) gained nothing, and 15 steps at 128
// rows lost 4 us; asked together with the sample's loads, or after the selection, the requests
// delayed the loads that are waited on. The segment kernel does not ask: with 2 CTAs per SM the
// other CTA keeps the memory system busy, and the same requests made prefill 0.3-2.7 % slower.
constexpr int kClusterPrefetchSteps = 4;

// Candidate buffer of the segment kernel, in 64-bit rank keys (score key << 32 | ~index):
// 8192 x 8 B = 64 KiB. It holds (a) a whole segment of <= 8192 keys (direct path), or (b) the
// survivors of the sampled threshold, which is sized to expect ~1.6-3.5 k survivors (~2 k at
// k = 2048, ~6.7K keys at k = 4096), or (c) the sample itself as 32-bit keys (<= 16384 of them).
// Two CTAs per SM (2 x ~81-97 KiB with the selection array) fit in the 228 KiB of an H100/H200 SM.
constexpr int kBufferCapacity = 8192;
constexpr int kWarpSlice = kBufferCapacity / kWarps;  // each warp appends into its own slice

// Sample: groups of 4 consecutive keys, evenly spaced over the segment; one group per 256 keys,
// between 512 and 4096 groups (2K-16K sampled keys). One group per 128 keys let ~20 % fewer
// keys through but cost more in the sample's loads and histograms than it saved: prefill 4096 x
// 131072 k = 2048 0.611 -> 0.594 ms, decode 64 x 131072 26.4 -> 25.6 us with 256 (H200).
constexpr int kSampleGroupKeys = 4;
constexpr int kSampleStride = 256;
constexpr int kMinSampleGroups = 512;
constexpr int kMaxSampleGroups = kBufferCapacity * 2 / kSampleGroupKeys;  // 32-bit keys fill 64 KiB
// The threshold is the sample's rank-r key with r = q + kSigmas * sqrt(q) + kRankSlack, where
// q = sample * k / n is the expected rank of the true k-th key: survivors fall below k only for a
// > ~4 sigma sample (then the exact fallback runs, never a truncation).
constexpr float kSampleSigmas = 4.0f;
constexpr float kRankSlack = 8.0f;

// Radix select: 8-bit digits, 256 bins; one warp finds the boundary bin (8 bins per lane).
constexpr int kRadixBits = 8;
constexpr int kRadixBins = 1 << kRadixBits;

// Histogram select (histogram_select.cuh): 11-bit digits, 2048 bins, 4 per thread for the block
// scan that finds the boundary bin (8 KiB of shared memory). A boundary bin of <= 128 keys is
// resolved by brute force (each key counts the keys above it, 8 loads in flight: <= 16 steps),
// which is cheaper than another histogram round over all candidates (at 256 keys, a first
// version's dependent 256-step loop made the 8192-key direct path slower than 8-bit radix).
constexpr int kHistBits = 11;
constexpr int kHistBins = 1 << kHistBits;
constexpr int kHistBinsPerThread = kHistBins / kThreads;
constexpr int kBruteForceMax = 128;
static_assert(kHistBinsPerThread * kThreads == kHistBins);

// Splitting a row over several CTAs (rows too few to fill the GPU): aim at 2 CTAs per SM; each
// split keeps its own exact top-k in the workspace and a merge kernel selects among
// splits x k candidates, which it holds in shared memory: 16384 x 8 B = 128 KiB (1 CTA per SM).
constexpr int kMergeCapacity = 16384;
constexpr int kMaxSplits = 16;
constexpr int kMinSegment = kBufferCapacity;  // shorter segments would not pay for the merge
// Few long rows with k <= kClusterMaxK go to the cluster kernel instead (cluster_kernel.cu): the
// segments of a row are the CTAs of one cluster and CTA 0 gathers their survivors (~2 k,
// ~4K at k = 2048, up to twice that with the coarse threshold) into an 8192-key buffer. Larger k
// would overflow it, so they keep the segment + merge pair, whose merge holds 16384 keys.
constexpr int kClusterMaxK = 2048;
// A split's count in the workspace when its keys above the row's gate did not fit (or the gate
// was degenerate): the merge then selects over the whole row exactly.
constexpr int32_t kSplitGateFailed = -1;

}  // namespace flashindexer::cuda::topk
