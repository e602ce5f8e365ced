// SPDX-License-Identifier: Apache-2.0
// dcp_pack_kernel: one rank's local top-k -> 64-bit DCP candidates (flashindexer/dist.h).
//
// Shapes: candidates [rows, >= k] i64, logits [rows, width] f32 or bf16, local_topk [rows, >= k]
// i32, row_starts [rows] i32 or none. One thread per (row, slot), grid-stride over rows * k: the
// work is a gather of k logits per row, so it is bound by latency, and a flat grid of 256-thread
// CTAs keeps the most loads in flight whatever rows and k are.
//
// The key is core/rank_key.h's: order-preserving score bits << 32 | ~global_id, with -0 mapped
// to +0, every NaN to score bits 0, and 0 for an empty slot. Values the host cannot
// check without a sync are made safe here instead: a row start is clamped to [0, width], and a
// local index whose column falls outside [0, width) or whose global id exceeds INT32_MAX packs as
// an empty slot. Valid inputs give the CPU's bits exactly.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/dcp/dcp.h"

namespace flashindexer::cuda {
namespace {

constexpr int kPackThreads = 256;
// Enough CTAs to fill any current GPU many times over; larger problems loop (grid-stride).
constexpr int64_t kMaxPackBlocks = int64_t{1} << 20;

struct PackParams {
  uint64_t* candidates;
  int64_t candidates_stride;
  const void* logits;
  int64_t logits_stride;
  int64_t width;
  int bf16;
  const int32_t* local_topk;
  int64_t local_topk_stride;
  const int32_t* row_starts;  // or nullptr
  int64_t row_starts_stride;
  int64_t rows;
  int k;
  int64_t rank;
  int64_t ranks;
  int64_t interleave;
};

__device__ __forceinline__ uint32_t ordered_score_bits(uint32_t bits) {
  const bool is_nan = (bits & 0x7fffffffu) > 0x7f800000u;
  bits = bits == 0x80000000u ? 0u : bits;  // -0 ranks as +0
  const uint32_t order = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return is_nan ? 0u : order;
}

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
      int64_t row_start = p.row_starts != nullptr ? p.row_starts[row * p.row_starts_stride] : 0;
      row_start = row_start < 0 ? 0 : row_start > p.width ? p.width : row_start;
      const int64_t column = row_start + local;
      // global(l, r) = (l / I) N I + r I + l % I (spec §9.1).
      const int64_t global_id = (local / p.interleave) * (p.ranks * p.interleave) +
                                p.rank * p.interleave + local % p.interleave;
      if (column < p.width && global_id <= INT32_MAX) {
        uint32_t bits;
        if (p.bf16) {
          const auto* row_logits = static_cast<const uint16_t*>(p.logits) + row * p.logits_stride;
          bits = static_cast<uint32_t>(row_logits[column]) << 16;
        } else {
          const auto* row_logits = static_cast<const uint32_t*>(p.logits) + row * p.logits_stride;
          bits = row_logits[column];
        }
        key = (static_cast<uint64_t>(ordered_score_bits(bits)) << 32) |
              static_cast<uint32_t>(~static_cast<uint32_t>(global_id));
      }
    }
    p.candidates[row * p.candidates_stride + slot] = key;
  }
}

}  // namespace

Status dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                           const TensorView& local_topk, const TensorView& row_starts, int k,
                           int rank, const DcpGroup& group, void* stream) {
  PackParams p{};
  p.candidates = candidates.ptr<uint64_t>();
  p.candidates_stride = candidates.stride[0];
  p.logits = logits.data;
  p.logits_stride = logits.stride[0];
  p.width = logits.shape[1];
  p.bf16 = logits.dtype == DType::kBF16;
  p.local_topk = local_topk.ptr<int32_t>();
  p.local_topk_stride = local_topk.stride[0];
  p.row_starts = row_starts.defined() ? row_starts.ptr<int32_t>() : nullptr;
  p.row_starts_stride = row_starts.defined() ? row_starts.stride[0] : 0;
  p.rows = logits.shape[0];
  p.k = k;
  p.rank = rank;
  p.ranks = group.ranks;
  p.interleave = group.interleave;
  const int64_t total = p.rows * k;
  if (total == 0) return Status::Ok();
  int64_t blocks = (total + kPackThreads - 1) / kPackThreads;
  blocks = blocks < kMaxPackBlocks ? blocks : kMaxPackBlocks;
  dcp_pack_kernel<<<static_cast<unsigned>(blocks), kPackThreads, 0,
                    static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("dcp_pack_candidates");
}

}  // namespace flashindexer::cuda
