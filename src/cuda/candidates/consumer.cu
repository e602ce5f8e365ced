// SPDX-License-Identifier: Apache-2.0
// The consumer's selection on dense logits (candidate_topk_per_row) on CUDA.
//
// Exact mode: the top-k among the visible positions inside the named blocks only, which a mask
// cannot give (masked -inf positions would rank above NaN ones inside the blocks, and would fill
// rows whose blocks hold fewer than k positions). So each row's named blocks are sorted and made
// unique (unique_blocks_kernel, one CTA per row, C <= 4096 keys in shared memory), their logits
// gathered into a compact row in ascending position order (gather_kernel), the library's top-k
// selects over the compact row, and the columns are mapped back to positions (remap_kernel).
// The map is increasing, so "ties to the smaller index" and the ascending order of unsorted
// output carry over: the answer is the CPU's bit for bit.
//
// vLLM-compatible mode: the mask (mask.cu) in place, then the top-k over the row's visible range.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/checks.h"
#include "cuda/candidates/block_sort.cuh"
#include "cuda/candidates/candidates.h"
#include "cuda/candidates/consumer.h"
#include "cuda/candidates/mask.cuh"
#include "cuda/candidates/workspace.h"
#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"

namespace flashindexer::cuda {
namespace candidates {
namespace {

constexpr int kUniqueThreads = 512;
constexpr int kGatherThreads = 256;
constexpr int64_t kMaxGatherCtasPerRow = 1024;
constexpr int kRemapThreads = 256;
constexpr int32_t kNoBlock = std::numeric_limits<int32_t>::max();

int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// blocks[t, 0, n) = the row's named blocks holding a visible position, ascending and unique;
// lengths[t] = the positions they hold.
__global__ void __launch_bounds__(kUniqueThreads)
    unique_blocks_kernel(int32_t* blocks, int32_t* lengths, const int32_t* candidates,
                         int64_t candidate_stride, int num_candidates, int sort_size,
                         BoundRows rows, int64_t width, int block_size) {
  extern __shared__ int32_t keys[];
  __shared__ int warp_sums[32];
  __shared__ int32_t last_block;
  __shared__ int unique_count;
  const int64_t t = blockIdx.x;
  const Visible vis = visible_of(rows, t, width);
  const int64_t row_blocks = (vis.count + block_size - 1) / block_size;
  const int32_t* row = candidates + t * candidate_stride;
  for (int i = threadIdx.x; i < sort_size; i += kUniqueThreads) {
    const int64_t c = i < num_candidates ? row[i] : -1;
    keys[i] = c >= 0 && c < row_blocks ? static_cast<int32_t>(c) : kNoBlock;
  }
  if (threadIdx.x == 0) last_block = -1;
  block_sort_ascending(keys, sort_size);
  // Each thread owns a contiguous run of the sorted keys: count its first occurrences, scan the
  // counts, write them in order.
  const int per_thread = (sort_size + kUniqueThreads - 1) / kUniqueThreads;
  const int begin = min(sort_size, static_cast<int>(threadIdx.x) * per_thread);
  const int end = min(sort_size, begin + per_thread);
  int mine = 0;
  for (int i = begin; i < end; ++i) {
    const bool first = keys[i] != kNoBlock && (i == 0 || keys[i] != keys[i - 1]);
    mine += first ? 1 : 0;
    if (keys[i] != kNoBlock && (i + 1 == sort_size || keys[i + 1] == kNoBlock)) {
      last_block = keys[i];
    }
  }
  int at = block_exclusive_scan(mine, warp_sums);
  int32_t* out = blocks + t * num_candidates;
  for (int i = begin; i < end; ++i) {
    if (keys[i] != kNoBlock && (i == 0 || keys[i] != keys[i - 1])) out[at++] = keys[i];
  }
  if (threadIdx.x == kUniqueThreads - 1) unique_count = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int n = unique_count;
    const int64_t tail = vis.count - int64_t{last_block} * block_size;
    const int64_t last_positions = n == 0 ? 0 : (tail < block_size ? tail : block_size);
    lengths[t] = n == 0 ? 0 : static_cast<int32_t>(int64_t{n - 1} * block_size + last_positions);
  }
}

__global__ void __launch_bounds__(kGatherThreads)
    gather_kernel(float* compact, int64_t compact_pitch, const int32_t* blocks,
                  const int32_t* lengths, const float* logits, int64_t logits_stride, int64_t width,
                  BoundRows rows, int num_candidates, int block_size) {
  const int64_t t = blockIdx.x;
  const Visible vis = visible_of(rows, t, width);
  const int64_t n = lengths[t];
  const float* row = logits + t * logits_stride + vis.start;
  const int32_t* row_blocks = blocks + t * num_candidates;
  for (int64_t j = blockIdx.y * int64_t{kGatherThreads} + threadIdx.x; j < n;
       j += int64_t{gridDim.y} * kGatherThreads) {
    compact[t * compact_pitch + j] =
        row[int64_t{row_blocks[j / block_size]} * block_size + j % block_size];
  }
}

__global__ void __launch_bounds__(kRemapThreads)
    remap_kernel(int32_t* out, int64_t out_stride, const int32_t* blocks, int num_candidates,
                 int block_size, int k) {
  const int64_t t = blockIdx.x;
  const int32_t* row_blocks = blocks + t * num_candidates;
  for (int i = threadIdx.x; i < k; i += kRemapThreads) {
    const int32_t column = out[t * out_stride + i];
    if (column >= 0) {
      out[t * out_stride + i] = row_blocks[column / block_size] * block_size + column % block_size;
    }
  }
}

__global__ void __launch_bounds__(kRemapThreads)
    row_range_kernel(int32_t* starts, int32_t* ends, int64_t count, BoundRows rows, int64_t width) {
  const int64_t t = blockIdx.x * int64_t{kRemapThreads} + threadIdx.x;
  if (t >= count) return;
  const Visible vis = visible_of(rows, t, width);
  starts[t] = static_cast<int32_t>(vis.start);
  ends[t] = static_cast<int32_t>(vis.start + vis.count);
}

}  // namespace

int64_t compact_pitch_of(int num_blocks, int block_size) {
  return pitch_floats(int64_t{num_blocks} * block_size);
}

size_t consumer_array_bytes(int64_t rows, int num_blocks, int block_size) {
  const size_t r = static_cast<size_t>(rows);
  return align_bytes(r * num_blocks * sizeof(int32_t)) + 3 * align_bytes(r * sizeof(int32_t)) +
         align_bytes(r * compact_pitch_of(num_blocks, block_size) * sizeof(float));
}

ConsumerScratch carve_consumer_arrays(void* base, int64_t rows, int num_blocks, int block_size) {
  RunOptions none;
  none.workspace = base;
  none.workspace_bytes = consumer_array_bytes(rows, num_blocks, block_size);
  Carver carver(none);
  ConsumerScratch s;
  const size_t r = static_cast<size_t>(rows);
  s.blocks = carver.take<int32_t>(r * num_blocks);
  s.lengths = carver.take<int32_t>(r);
  s.row_starts = carver.take<int32_t>(r);
  s.row_ends = carver.take<int32_t>(r);
  s.compact_pitch = compact_pitch_of(num_blocks, block_size);
  s.compact = carver.take<float>(r * s.compact_pitch);
  return s;
}

Status run_consumer(const char* op, int32_t* out, int64_t out_stride, const LogitsRows& logits,
                    const BoundRows& bounds, const CandidateRowsOnDevice& candidates, int k,
                    bool sorted, bool vllm_compatible, const ConsumerScratch& scratch) {
  if (logits.rows == 0) return Status::Ok();
  auto stream = static_cast<cudaStream_t>(scratch.topk_run.cuda_stream);
  const unsigned rows = static_cast<unsigned>(logits.rows);
  const TensorView out_view =
      TensorView::contiguous(out, DType::kI32, {logits.rows, k}, Device::kCUDA)
          .with_row_stride(out_stride);
  if (vllm_compatible) {
    if ((logits.width + kMaskWindowColumns - 1) / kMaskWindowColumns > 65535) {
      return Status::Unsupported(concat(op, ": logits of ", logits.width,
                                        " columns exceed the CUDA mask's ",
                                        int64_t{65535} * kMaskWindowColumns));
    }
    row_range_kernel<<<static_cast<unsigned>((logits.rows + kRemapThreads - 1) / kRemapThreads),
                       kRemapThreads, 0, stream>>>(scratch.row_starts, scratch.row_ends,
                                                   logits.rows, bounds, logits.width);
    if (Status status = launch_status(op); !status.ok()) return status;
    if (Status status = to_status(launch_mask(logits.data, logits.stride, logits.rows, logits.width,
                                              bounds, candidates.data, candidates.stride,
                                              candidates.count, candidates.block_size, stream),
                                  op, "kernel launch");
        !status.ok()) {
      return status;
    }
    const TensorView logits_view =
        TensorView::contiguous(logits.data, DType::kF32, {logits.rows, logits.width}, Device::kCUDA)
            .with_row_stride(logits.stride);
    const TensorView starts =
        TensorView::contiguous(scratch.row_starts, DType::kI32, {logits.rows}, Device::kCUDA);
    const TensorView ends =
        TensorView::contiguous(scratch.row_ends, DType::kI32, {logits.rows}, Device::kCUDA);
    return topk_per_row(out_view, logits_view, RowRanges::prefill(starts, ends), k, sorted,
                        scratch.topk_run);
  }
  const int sort_size = pow2_at_least(candidates.count);
  unique_blocks_kernel<<<rows, kUniqueThreads, sort_size * sizeof(int32_t), stream>>>(
      scratch.blocks, scratch.lengths, candidates.data, candidates.stride, candidates.count,
      sort_size, bounds, logits.width, candidates.block_size);
  if (Status status = launch_status(op); !status.ok()) return status;
  const int64_t compact_width = int64_t{candidates.count} * candidates.block_size;
  const int64_t ctas_per_row = std::clamp<int64_t>(
      (compact_width + kGatherThreads - 1) / kGatherThreads, 1, kMaxGatherCtasPerRow);
  gather_kernel<<<dim3(rows, static_cast<unsigned>(ctas_per_row)), kGatherThreads, 0, stream>>>(
      scratch.compact, scratch.compact_pitch, scratch.blocks, scratch.lengths, logits.data,
      logits.stride, logits.width, bounds, candidates.count, candidates.block_size);
  if (Status status = launch_status(op); !status.ok()) return status;
  const TensorView compact = TensorView::contiguous(scratch.compact, DType::kF32,
                                                    {logits.rows, compact_width}, Device::kCUDA)
                                 .with_row_stride(scratch.compact_pitch);
  const TensorView lengths =
      TensorView::contiguous(scratch.lengths, DType::kI32, {logits.rows}, Device::kCUDA);
  if (Status status =
          topk_per_row(out_view, compact, RowRanges::decode(lengths), k, sorted, scratch.topk_run);
      !status.ok()) {
    return status;
  }
  remap_kernel<<<rows, kRemapThreads, 0, stream>>>(out, out_stride, scratch.blocks,
                                                   candidates.count, candidates.block_size, k);
  return launch_status(op);
}

}  // namespace candidates

size_t candidate_topk_per_row_workspace_size(int64_t rows, int64_t width, int num_blocks,
                                             int block_size, int k) {
  if (num_blocks < 1 || block_size < 1 || k < 1) return 0;
  const int64_t compact_width = int64_t{num_blocks} * block_size;
  const size_t topk = std::max(topk_per_row_workspace_size(rows, compact_width, k),
                               topk_per_row_workspace_size(rows, std::max<int64_t>(width, 1), k));
  return candidates::kArrayAlignment +
         candidates::consumer_array_bytes(rows, num_blocks, block_size) + topk;
}

Status candidate_topk_per_row(const TensorView& out, const TensorView& logits,
                              const CandidateRows& rows, const TensorView& candidates,
                              int block_size, int k, bool sorted, bool vllm_compatible,
                              const RunOptions& options) {
  const char* op = "candidate_topk_per_row";
  const int64_t count = logits.shape[0];
  const int num_blocks = static_cast<int>(candidates.shape[1]);
  const size_t needed =
      candidate_topk_per_row_workspace_size(count, logits.shape[1], num_blocks, block_size, k);
  candidates::Carver carver(options);
  if (Status status = carver.check(
          op, needed, "candidate_topk_per_row_cuda_workspace_size(rows, width, C, cb, k)");
      !status.ok()) {
    return status;
  }
  void* arrays =
      carver.take<unsigned char>(candidates::consumer_array_bytes(count, num_blocks, block_size));
  candidates::ConsumerScratch scratch =
      candidates::carve_consumer_arrays(arrays, count, num_blocks, block_size);
  scratch.topk_run = options;
  scratch.topk_run.workspace = carver.rest();
  scratch.topk_run.workspace_bytes = carver.rest_bytes();
  const candidates::LogitsRows logits_rows{logits.ptr<float>(), logits.stride[0], count,
                                           logits.shape[1]};
  const candidates::CandidateRowsOnDevice candidate_rows{
      candidates.ptr<const int32_t>(), candidates.stride[0], num_blocks, block_size};
  return candidates::run_consumer(op, out.ptr<int32_t>(), out.stride[0], logits_rows,
                                  candidates::bound_rows_of(rows), candidate_rows, k, sorted,
                                  vllm_compatible, scratch);
}

}  // namespace flashindexer::cuda
