// SPDX-License-Identifier: Apache-2.0
// gather_selected_scores: after a batch's selection, the score of every selected key read back
// from the logits slab the selection read (so the logits op's very bits), before the slab is
// reused by the next batch.
//
// Shapes: one CTA of 256 threads per row, each thread a slot i < k (k <= 4096: at most 16 per
// thread). The reads are scattered over the row (one sector per selected key), which is what
// the work is: k loads a row against the width loads of the scoring and the top-k before it.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/indexer/selected_scores.h"
#include "cuda/topk/keys.cuh"
#include "cuda/topk/params.h"

namespace flashindexer::cuda {
namespace {

constexpr int kGatherThreads = 256;

struct GatherParams {
  float* scores;
  int64_t scores_stride;
  const int32_t* out;
  int64_t out_stride0;
  int64_t out_stride1;
  const float* logits;
  int64_t logits_stride;
  int64_t rows;
  int k;
  int leave_empty_rows;
};

// The row starts of the top-k's ranges (its own clamp, so the column the top-k's index came from).
struct TopKStarts {
  topk::Params ranges;
  __device__ __forceinline__ void of(int64_t row, int64_t& start, int64_t& count) const {
    topk::row_range(ranges, row, start, count);
  }
};

// The row starts of the candidate kernels' bounds.
struct BoundStarts {
  candidates::BoundRows bounds;
  int64_t width;
  __device__ __forceinline__ void of(int64_t row, int64_t& start, int64_t& count) const {
    const candidates::Visible vis = candidates::visible_of(bounds, row, width);
    start = vis.start;
    count = vis.count;
  }
};

template <typename Starts>
__global__ void __launch_bounds__(kGatherThreads)
    gather_scores_kernel(const __grid_constant__ GatherParams p, const __grid_constant__ Starts s) {
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  const int64_t row = blockIdx.x;
  int64_t start;
  int64_t count;
  s.of(row, start, count);
  if (p.leave_empty_rows && count == 0) return;
  const int32_t* answer = p.out + row * p.out_stride0;
  const float* logits = p.logits + row * p.logits_stride;
  float* scores = p.scores + row * p.scores_stride;
  for (int i = threadIdx.x; i < p.k; i += kGatherThreads) {
    const int32_t index = answer[i * p.out_stride1];
    // A selection writes indices inside [0, count) or -1; anything else reads nothing.
    scores[i] = index >= 0 && index < count ? logits[start + index] : -INFINITY;
  }
}

GatherParams gather_params(const TensorView& scores, const TensorView& out,
                           const TensorView& logits, int k, bool leave_empty_rows) {
  GatherParams p{};
  p.scores = scores.ptr<float>();
  p.scores_stride = scores.stride[0];
  p.out = out.ptr<const int32_t>();
  p.out_stride0 = out.stride[0];
  p.out_stride1 = out.stride[1];
  p.logits = logits.ptr<const float>();
  p.logits_stride = logits.stride[0];
  p.rows = logits.shape[0];
  p.k = k;
  p.leave_empty_rows = leave_empty_rows ? 1 : 0;
  return p;
}

template <typename Starts>
Status launch_gather(const GatherParams& p, const Starts& starts, void* stream) {
  if (p.rows == 0) return Status::Ok();
  return to_status(
      launch_dependent(gather_scores_kernel<Starts>, dim3(static_cast<unsigned>(p.rows)),
                       dim3(kGatherThreads), 0, static_cast<cudaStream_t>(stream), 0, p, starts),
      "indexer", "scores gather launch");
}

}  // namespace

Status gather_selected_scores(const TensorView& scores, const TensorView& out,
                              const TensorView& logits, const RowRanges& ranges, int k,
                              EmptyScoreRows empty_rows, void* stream) {
  const TopKStarts starts{topk::make_params(out, ranges, logits.shape[1], k, false)};
  return launch_gather(gather_params(scores, out, logits, k, empty_rows == EmptyScoreRows::kLeave),
                       starts, stream);
}

Status gather_selected_scores(const TensorView& scores, const TensorView& out,
                              const TensorView& logits, const candidates::BoundRows& bounds, int k,
                              void* stream) {
  const BoundStarts starts{bounds, logits.shape[1]};
  return launch_gather(gather_params(scores, out, logits, k, false), starts, stream);
}

}  // namespace flashindexer::cuda
