// SPDX-License-Identifier: Apache-2.0
// select_candidate_blocks on CUDA: per row, the block scores of candidates.h, then the exact
// top-C of them by the library's row top-k, then -1 for the -inf blocks.
//
// The block order is the top-k's total order on transformed scores: NaN blocks (and the pinned
// newest block) score +inf, so "NaN ranks equal to +inf, ties to the smaller block id" is the
// top-k's "larger score first, ties to the smaller index" with no NaN left; sorted output gives
// the best block first. So the selection is exact and bit-identical to the CPU's, which ranks the
// same transformed scores by the same rank keys.
//
// Shapes: rows x ceil(width / cb) block scores of workspace (each row padded to 256 bytes), one
// thread per block reading its cb logits (consecutive threads read consecutive blocks: whole
// sectors); the scores' row lengths (the row's visible blocks) are the top-k's decode lengths.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/rows.cuh"
#include "cuda/candidates/select.h"
#include "cuda/candidates/workspace.h"
#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"

namespace flashindexer::cuda {
namespace {

constexpr int kScoreThreads = 256;
// Blocks of one row handled by one CTA per grid-stride step; the grid's y extent is capped so
// that any width fits the 65535 limit.
constexpr int64_t kMaxScoreCtasPerRow = 1024;
constexpr int kFinishThreads = 256;

__global__ void __launch_bounds__(kScoreThreads)
    block_scores_kernel(float* scores, int64_t score_pitch, int32_t* row_blocks,
                        const float* logits, int64_t logits_stride, int64_t width,
                        candidates::BoundRows rows, int block_size) {
  const int64_t t = blockIdx.x;
  const candidates::Visible vis = candidates::visible_of(rows, t, width);
  const int64_t blocks = (vis.count + block_size - 1) / block_size;
  if (blockIdx.y == 0 && threadIdx.x == 0) row_blocks[t] = static_cast<int32_t>(blocks);
  const float* row = logits + t * logits_stride + vis.start;
  for (int64_t b = blockIdx.y * int64_t{kScoreThreads} + threadIdx.x; b < blocks;
       b += int64_t{gridDim.y} * kScoreThreads) {
    float best = -INFINITY;
    if (b == blocks - 1) {
      best = INFINITY;  // the newest visible block is pinned
    } else {
      const float* block = row + b * block_size;
      for (int o = 0; o < block_size; ++o) {
        const float x = block[o];
        best = (x > best || isnan(x)) ? x : best;  // NaN sticks: NaN > x is false
      }
      best = isnan(best) ? INFINITY : best;
    }
    scores[t * score_pitch + b] = best;
  }
}

// out[t, i] = -1 where the selected block scores -inf (the top-k already wrote -1 past the row's
// blocks). The top-C is sorted best first, so those slots are a suffix: one lane per row finds
// where it starts by bisection (11 reads at C = 2048, where reading every selected block's score
// took 0.13 ms of a 4096-row source layer on an H200), and its warp clears it.
constexpr int kFinishRowsPerCta = kFinishThreads / 32;

__global__ void __launch_bounds__(kFinishThreads)
    drop_empty_blocks_kernel(int32_t* out, int64_t out_stride, const float* scores,
                             int64_t score_pitch, int num_blocks, int64_t rows) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kFinishRowsPerCta + threadIdx.x / 32;
  if (t >= rows) return;
  int32_t* row_out = out + t * out_stride;
  const float* row_scores = scores + t * score_pitch;
  auto empty = [&](int i) {
    const int32_t id = row_out[i];
    return id < 0 || row_scores[id] == -INFINITY;
  };
  int first = 0;  // the first empty slot: slots [first, num_blocks) are empty
  if (threadIdx.x % 32 == 0) {
    int end = num_blocks;
    while (first < end) {
      const int mid = first + (end - first) / 2;
      if (empty(mid)) {
        end = mid;
      } else {
        first = mid + 1;
      }
    }
  }
  first = __shfl_sync(0xffffffffu, first, 0);
  for (int i = first + static_cast<int>(threadIdx.x % 32); i < num_blocks; i += 32) {
    if (row_out[i] >= 0) row_out[i] = -1;
  }
}

int64_t score_pitch(int64_t width, int block_size) {
  const int64_t blocks = (width + block_size - 1) / block_size;
  return candidates::pitch_floats(blocks);
}

}  // namespace

namespace candidates {

size_t block_select_array_bytes(int64_t rows, int64_t width, int block_size) {
  return align_bytes(static_cast<size_t>(rows) * score_pitch(width, block_size) * 4) +
         align_bytes(static_cast<size_t>(rows) * 4);
}

BlockSelectScratch carve_block_select(void* base, int64_t rows, int64_t width, int block_size) {
  BlockSelectScratch scratch;
  auto* at = static_cast<unsigned char*>(base);
  scratch.pitch = score_pitch(width, block_size);
  scratch.scores = reinterpret_cast<float*>(at);
  at += align_bytes(static_cast<size_t>(rows) * scratch.pitch * 4);
  scratch.row_blocks = reinterpret_cast<int32_t*>(at);
  return scratch;
}

Status select_blocks(const char* op, int32_t* out, int64_t out_stride, const LogitsRows& logits,
                     const BoundRows& bounds, int num_blocks, int block_size,
                     const BlockSelectScratch& scratch) {
  const int64_t count = logits.rows;
  const int64_t width = logits.width;
  if (count == 0) return Status::Ok();
  const int64_t blocks = (width + block_size - 1) / block_size;
  auto stream = static_cast<cudaStream_t>(scratch.topk_run.cuda_stream);
  const int64_t ctas_per_row =
      std::clamp<int64_t>((blocks + kScoreThreads - 1) / kScoreThreads, 1, kMaxScoreCtasPerRow);
  block_scores_kernel<<<dim3(static_cast<unsigned>(count), static_cast<unsigned>(ctas_per_row)),
                        kScoreThreads, 0, stream>>>(scratch.scores, scratch.pitch,
                                                    scratch.row_blocks, logits.data, logits.stride,
                                                    width, bounds, block_size);
  if (Status status = launch_status(op); !status.ok()) return status;
  return select_top_blocks(op, out, out_stride, count, blocks, num_blocks, scratch);
}

Status select_top_blocks(const char* op, int32_t* out, int64_t out_stride, int64_t count,
                         int64_t blocks, int num_blocks, const BlockSelectScratch& scratch) {
  if (count == 0) return Status::Ok();
  auto stream = static_cast<cudaStream_t>(scratch.topk_run.cuda_stream);
  const TensorView score_view =
      TensorView::contiguous(scratch.scores, DType::kF32, {count, std::max<int64_t>(blocks, 1)},
                             Device::kCUDA)
          .with_row_stride(scratch.pitch);
  const TensorView lengths =
      TensorView::contiguous(scratch.row_blocks, DType::kI32, {count}, Device::kCUDA);
  const TensorView out_view =
      TensorView::contiguous(out, DType::kI32, {count, num_blocks}, Device::kCUDA)
          .with_row_stride(out_stride);
  if (Status status = topk_per_row(out_view, score_view, RowRanges::decode(lengths), num_blocks,
                                   /*sorted=*/true, scratch.topk_run);
      !status.ok()) {
    return status;
  }
  drop_empty_blocks_kernel<<<static_cast<unsigned>((count + kFinishRowsPerCta - 1) /
                                                   kFinishRowsPerCta),
                             kFinishThreads, 0, stream>>>(out, out_stride, scratch.scores,
                                                          scratch.pitch, num_blocks, count);
  return launch_status(op);
}

}  // namespace candidates

size_t select_candidate_blocks_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                              int block_size) {
  if (block_size < 1 || num_blocks < 1) return 0;
  const int64_t blocks = (width + block_size - 1) / block_size;
  return candidates::kArrayAlignment +
         candidates::block_select_array_bytes(rows, width, block_size) +
         topk_per_row_workspace_size(rows, std::max<int64_t>(blocks, 1), num_blocks);
}

Status select_candidate_blocks(const TensorView& out, const TensorView& logits,
                               const CandidateRows& rows, int num_blocks, int block_size,
                               const RunOptions& options) {
  const char* op = "select_candidate_blocks";
  const int64_t count = logits.shape[0];
  const int64_t width = logits.shape[1];
  const size_t needed =
      select_candidate_blocks_workspace_size(count, width, num_blocks, block_size);
  candidates::Carver carver(options);
  if (Status status = carver.check(
          op, needed, "select_candidate_blocks_cuda_workspace_size(rows, width, C, cb)");
      !status.ok()) {
    return status;
  }
  if (count == 0) return Status::Ok();
  candidates::BlockSelectScratch scratch =
      candidates::carve_block_select(carver.rest(), count, width, block_size);
  carver.take<unsigned char>(candidates::block_select_array_bytes(count, width, block_size));
  scratch.topk_run = options;
  scratch.topk_run.workspace = carver.rest();
  scratch.topk_run.workspace_bytes = carver.rest_bytes();
  return candidates::select_blocks(
      op, out.ptr<int32_t>(), out.stride[0],
      {const_cast<float*>(logits.ptr<const float>()), logits.stride[0], count, width},
      candidates::bound_rows_of(rows), num_blocks, block_size, scratch);
}

}  // namespace flashindexer::cuda
