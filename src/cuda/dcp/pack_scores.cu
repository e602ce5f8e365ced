// SPDX-License-Identifier: Apache-2.0
// dcp_pack_scores_kernel: one rank's local top-k -> 64-bit DCP candidates (flashindexer/dist.h),
// each slot's score given (the indexer's scores output) instead of read from logits.
//
// Shapes: candidates [rows, >= k] i64, scores [rows, >= k] f32, local_topk [rows, >= k] i32. One
// thread per (row, slot), grid-stride over rows * k: the same flat grid as pack.cu, with
// coalesced score reads instead of a gather. The key is the one pack.cu writes (core/rank_key.h's
// score_key: -0 as +0, NaN as 0), so both packs give the same bits for the same scores. A negative
// index, or one whose global id exceeds INT32_MAX, packs as an empty slot.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/rank_key.cuh"
#include "cuda/dcp/dcp.h"

namespace flashindexer::cuda {
namespace {

constexpr int kPackThreads = 256;
constexpr int64_t kMaxPackBlocks = int64_t{1} << 20;

struct PackScoresParams {
  uint64_t* candidates;
  int64_t candidates_stride;
  const float* scores;
  int64_t scores_stride;
  const int32_t* local_topk;
  int64_t local_topk_stride;
  int64_t rows;
  int k;
  int64_t rank;
  int64_t ranks;
  int64_t interleave;
};

__global__ void __launch_bounds__(kPackThreads)
    dcp_pack_scores_kernel(const __grid_constant__ PackScoresParams p) {
  const int64_t total = p.rows * p.k;
  for (int64_t e = blockIdx.x * int64_t{kPackThreads} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * kPackThreads) {
    const int64_t row = e / p.k;
    const int64_t slot = e - row * p.k;
    const int64_t local = p.local_topk[row * p.local_topk_stride + slot];
    uint64_t key = 0;
    if (local >= 0) {
      // global(l, r) = (l / I) N I + r I + l % I (spec §9.1).
      const int64_t global_id = (local / p.interleave) * (p.ranks * p.interleave) +
                                p.rank * p.interleave + local % p.interleave;
      if (global_id <= INT32_MAX) {
        const uint32_t bits = __float_as_uint(p.scores[row * p.scores_stride + slot]);
        key = rank_key(score_key(bits), static_cast<uint32_t>(global_id));
      }
    }
    p.candidates[row * p.candidates_stride + slot] = key;
  }
}

}  // namespace

Status dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                       const TensorView& local_topk, int k, int rank,
                                       const DcpGroup& group, void* stream) {
  PackScoresParams p{};
  p.candidates = candidates.ptr<uint64_t>();
  p.candidates_stride = candidates.stride[0];
  p.scores = scores.ptr<const float>();
  p.scores_stride = scores.stride[0];
  p.local_topk = local_topk.ptr<const int32_t>();
  p.local_topk_stride = local_topk.stride[0];
  p.rows = scores.shape[0];
  p.k = k;
  p.rank = rank;
  p.ranks = group.ranks;
  p.interleave = group.interleave;
  const int64_t total = p.rows * k;
  if (total == 0) return Status::Ok();
  int64_t blocks = (total + kPackThreads - 1) / kPackThreads;
  blocks = blocks < kMaxPackBlocks ? blocks : kMaxPackBlocks;
  dcp_pack_scores_kernel<<<static_cast<unsigned>(blocks), kPackThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("dcp_pack_candidates_from_scores");
}

}  // namespace flashindexer::cuda
