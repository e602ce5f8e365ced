// SPDX-License-Identifier: Apache-2.0
// dcp_pack_kernel: one rank's local top-k -> 64-bit DCP candidates (flashindexer/dist.h), each
// slot's score gathered from the logits (dcp_pack_candidates) or given (the indexer's scores
// output: dcp_pack_candidates_from_scores).
//
// Shapes: candidates [rows, >= k] i64, logits [rows, width] f32 or bf16 and row_starts [rows] i32
// or none, or scores [rows, >= k] f32; local_topk [rows, >= k] i32. One thread per (row, slot),
// grid-stride over rows * k: the logits form is a gather of k logits per row, so it is bound by
// latency, and a flat grid of 256-thread CTAs keeps the most loads in flight whatever rows and k
// are; the scores form reads its scores coalesced on the same grid.
//
// The key is core/rank_key.h's: rank_key(score_key(score bits), global id), so -0 ranks as +0,
// every NaN as score key 0, and 0 is an empty slot; both forms give the same bits for the same
// scores. Values the host cannot check without a sync are made safe here instead: a row start is
// clamped to [0, width], and a local index whose column falls outside [0, width) or whose global
// id exceeds INT32_MAX packs as an empty slot. Valid inputs give the CPU's bits exactly.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/rank_key.cuh"
#include "cuda/dcp/dcp.h"

namespace flashindexer::cuda {
namespace {

constexpr int kPackThreads = 256;
// Enough CTAs to fill any current GPU many times over; larger problems loop (grid-stride).
constexpr int64_t kMaxPackBlocks = int64_t{1} << 20;

struct PackParams {
  uint64_t* candidates;
  int64_t candidates_stride;
  const void* logits;  // the logits form
  int64_t logits_stride;
  int64_t width;
  int bf16;
  const int32_t* row_starts;  // or nullptr
  int64_t row_starts_stride;
  const float* scores;  // the scores form
  int64_t scores_stride;
  const int32_t* local_topk;
  int64_t local_topk_stride;
  int64_t rows;
  int k;
  int64_t rank;
  int64_t ranks;
  int64_t interleave;
};

// The score bits of slot `slot` of row `row`, whose local index is `local` (>= 0), or false
// when its column lies outside the logits.
template <bool kFromScores>
__device__ __forceinline__ bool slot_score_bits(const PackParams& p, int64_t row, int64_t slot,
                                                int64_t local, uint32_t* bits) {
  if constexpr (kFromScores) {
    *bits = __float_as_uint(p.scores[row * p.scores_stride + slot]);
    return true;
  } else {
    int64_t row_start = p.row_starts != nullptr ? p.row_starts[row * p.row_starts_stride] : 0;
    row_start = row_start < 0 ? 0 : row_start > p.width ? p.width : row_start;
    const int64_t column = row_start + local;
    if (column >= p.width) return false;
    if (p.bf16) {
      const auto* row_logits = static_cast<const uint16_t*>(p.logits) + row * p.logits_stride;
      *bits = static_cast<uint32_t>(row_logits[column]) << 16;
    } else {
      *bits = static_cast<const uint32_t*>(p.logits)[row * p.logits_stride + column];
    }
    return true;
  }
}

template <bool kFromScores>
__global__ void __launch_bounds__(kPackThreads)
    dcp_pack_kernel(const __grid_constant__ PackParams p) {
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
      uint32_t bits;
      if (global_id <= INT32_MAX && slot_score_bits<kFromScores>(p, row, slot, local, &bits)) {
        key = rank_key(score_key(bits), static_cast<uint32_t>(global_id));
      }
    }
    p.candidates[row * p.candidates_stride + slot] = key;
  }
}

// The shared fields, then the launch (nothing to do for no slots).
PackParams pack_params(const TensorView& candidates, const TensorView& local_topk, int64_t rows,
                       int k, int rank, const DcpGroup& group) {
  PackParams p{};
  p.candidates = candidates.ptr<uint64_t>();
  p.candidates_stride = candidates.stride[0];
  p.local_topk = local_topk.ptr<int32_t>();
  p.local_topk_stride = local_topk.stride[0];
  p.rows = rows;
  p.k = k;
  p.rank = rank;
  p.ranks = group.ranks;
  p.interleave = group.interleave;
  return p;
}

template <bool kFromScores>
Status launch_pack(const PackParams& p, void* stream, const char* op) {
  const int64_t total = p.rows * p.k;
  if (total == 0) return Status::Ok();
  int64_t blocks = (total + kPackThreads - 1) / kPackThreads;
  blocks = blocks < kMaxPackBlocks ? blocks : kMaxPackBlocks;
  dcp_pack_kernel<kFromScores>
      <<<static_cast<unsigned>(blocks), kPackThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status(op);
}

}  // namespace

Status dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                           const TensorView& local_topk, const TensorView& row_starts, int k,
                           int rank, const DcpGroup& group, void* stream) {
  PackParams p = pack_params(candidates, local_topk, logits.shape[0], k, rank, group);
  p.logits = logits.data;
  p.logits_stride = logits.stride[0];
  p.width = logits.shape[1];
  p.bf16 = logits.dtype == DType::kBF16;
  p.row_starts = row_starts.defined() ? row_starts.ptr<int32_t>() : nullptr;
  p.row_starts_stride = row_starts.defined() ? row_starts.stride[0] : 0;
  return launch_pack<false>(p, stream, "dcp_pack_candidates");
}

Status dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                       const TensorView& local_topk, int k, int rank,
                                       const DcpGroup& group, void* stream) {
  PackParams p = pack_params(candidates, local_topk, scores.shape[0], k, rank, group);
  p.scores = scores.ptr<const float>();
  p.scores_stride = scores.stride[0];
  return launch_pack<true>(p, stream, "dcp_pack_candidates_from_scores");
}

}  // namespace flashindexer::cuda
