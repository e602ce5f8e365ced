// SPDX-License-Identifier: Apache-2.0
// The launch of a row kernel (rows_fp8.cu, rows_mxfp4.cu), shared by both formats: the grid for a
// job, its instantiation by input type (bf16 or f32), lanes per row (D / 16), vector access and
// RoPE, and the split of a job of more than 2^30 rows into launches of at most that (the kernels
// index rows in 32 bits). Host code of the CUDA backend.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <numeric>
#include <type_traits>

#include "core/checks.h"
#include "cuda/common/check.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda::quant {
namespace rows_launch {

// Blocks of kBlockThreads for `job`, `lanes` lanes a row, `rows` rows a group of lanes.
inline unsigned blocks_for(const RowJob& job, int lanes, int rows) {
  const int64_t groups = (job.rows + rows - 1) / rows;
  return static_cast<unsigned>((groups * lanes + kBlockThreads - 1) / kBlockThreads);
}

// Kernel::launch<In, kLanes, kVector, kStyle>(job, stream) launches one instantiation. The RoPE
// style is a template parameter: tested at run time once a row and once a token, it held the
// MXFP4 query + RoPE at 0.1436 ms against 0.1406 (H200, 16K tokens x 64 heads).
template <typename Kernel, typename In, int kLanes, RopeStyle kStyle>
void launch(const RowJob& job, cudaStream_t stream) {
  if (job.vector) {
    Kernel::template launch<In, kLanes, true, kStyle>(job, stream);
  } else {
    Kernel::template launch<In, kLanes, false, kStyle>(job, stream);
  }
}

template <typename Kernel, typename In, int kLanes>
void launch_rope_or_not(const RowJob& job, cudaStream_t stream) {
  // RoPE needs D >= 64 (checked by src/api): no rotating instantiation for 2-lane rows.
  if constexpr (kLanes >= 4) {
    if (job.rope.style == static_cast<int>(RopeStyle::kNeox)) {
      return launch<Kernel, In, kLanes, RopeStyle::kNeox>(job, stream);
    }
    if (job.rope.style == static_cast<int>(RopeStyle::kInterleaved)) {
      return launch<Kernel, In, kLanes, RopeStyle::kInterleaved>(job, stream);
    }
  }
  launch<Kernel, In, kLanes, RopeStyle::kNone>(job, stream);
}

template <typename Kernel, typename In>
void launch_by_dim(const RowJob& job, cudaStream_t stream) {
  switch (job.head_dim) {
    case 32:
      return launch_rope_or_not<Kernel, In, 2>(job, stream);
    case 64:
      return launch_rope_or_not<Kernel, In, 4>(job, stream);
    case 128:
      return launch_rope_or_not<Kernel, In, 8>(job, stream);
    default:
      return launch_rope_or_not<Kernel, In, 16>(job, stream);
  }
}

// Rows of one launch: at most 2^30, so a group's first row (and every row and token index the
// FastDivisors split) stays below 2^31.
constexpr int64_t kMaxRowsPerLaunch = int64_t{1} << 30;

template <typename T>
T* advanced(T* pointer, int64_t bytes) {
  using Byte = std::conditional_t<std::is_const_v<T>, const uint8_t, uint8_t>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(pointer) + bytes);
}

// Bytes from row 0 of `rows` to row `start` (a multiple of rows.inner).
inline int64_t rows_bytes(const Rows& rows, int64_t start, int64_t element) {
  return start / rows.inner * rows.outer_stride * element;
}

// Rows [start, start + count) of `job` as a job of its own: every pointer moved to row `start`,
// a multiple of the rows' inner dimension, so each row keeps its (outer, inner) split.
inline RowJob job_part(const RowJob& job, int64_t start, int64_t count, int64_t scale_element) {
  RowJob part = job;
  part.rows = count;
  part.input = advanced(job.input, rows_bytes(job.input_rows, start, job.input_bf16 ? 2 : 4));
  Destination& to = part.destination;
  if (to.slots != nullptr) {
    to.slots = advanced(to.slots, start * (to.slots_i64 ? 8 : 4));
  } else {
    to.values = advanced(to.values, rows_bytes(to.value_rows, start, 1));
    if (to.scales != nullptr) {
      to.scales = advanced(to.scales, rows_bytes(to.scale_rows, start, scale_element));
    }
  }
  WeightFold& fold = part.weights;
  if (fold.weights != nullptr) {
    fold.weights =
        advanced(fold.weights, rows_bytes(fold.weight_rows, start, fold.weights_bf16 ? 2 : 4));
    fold.weights_out = advanced(fold.weights_out, rows_bytes(fold.weights_out_rows, start, 4));
  }
  Rope& rope = part.rope;
  if (rope.style != static_cast<int>(RopeStyle::kNone)) {
    rope.positions = advanced(rope.positions, start / job.rows_per_token * rope.positions_stride *
                                                  (rope.positions_i64 ? 8 : 4));
  }
  return part;
}

// Gives every view of `job` the job's inner dimension, the largest of its views' (H of a
// [T, H, D] job, else 1): a [T * H, D]-shaped view (inner 1) is the same rows as [T, H, D] with
// strides (H * stride, stride). The kernels then split a row into (outer, inner) once for all
// views. False when a view has another inner dimension (the ops' shape checks exclude it), or a
// RoPE job's rows per token are neither 1 nor that dimension.
inline bool share_row_split(RowJob& job) {
  Destination& to = job.destination;
  WeightFold& fold = job.weights;
  Rows* views[5] = {&job.input_rows, nullptr, nullptr, nullptr, nullptr};
  if (to.slots == nullptr) {
    views[1] = &to.value_rows;
    if (to.scales != nullptr) views[2] = &to.scale_rows;
  }
  if (fold.weights != nullptr) views[3] = &fold.weight_rows, views[4] = &fold.weights_out_rows;
  int64_t inner = 1;
  for (const Rows* view : views) {
    if (view != nullptr && view->inner > inner) inner = view->inner;
  }
  if (!fast_divisor_fits(inner) || inner > kMaxRowsPerLaunch) return false;
  for (Rows* view : views) {
    if (view == nullptr || view->inner == inner) continue;
    if (view->inner != 1) return false;
    *view = rows_with(inner, view->outer_stride * inner, view->outer_stride);
  }
  if (job.rope.style != static_cast<int>(RopeStyle::kNone) && job.rows_per_token != 1 &&
      job.rows_per_token != inner) {
    return false;
  }
  job.row_inner = static_cast<uint32_t>(inner);
  job.by_row_inner = FastDivisor(static_cast<uint32_t>(inner));
  return true;
}

template <typename Kernel>
void launch_part(const RowJob& job, cudaStream_t stream) {
  if (job.input_bf16) {
    launch_by_dim<Kernel, Bf16Bits>(job, stream);
  } else {
    launch_by_dim<Kernel, float>(job, stream);
  }
}

}  // namespace rows_launch

// Launches `job` with the row kernel Kernel (one group of D / 16 lanes per rows_per_group rows),
// in parts of at most 2^30 rows, each starting at a multiple of the rows' inner dimension.
// Kernel::kScaleElement: bytes of one element of a scales view.
template <typename Kernel>
Status launch_rows(const RowJob& given, cudaStream_t stream, const char* op) {
  if (given.rows == 0) return Status::Ok();
  RowJob job = given;
  if (!rows_launch::share_row_split(job)) {
    return Status::Unsupported(concat(op, ": the CUDA kernels take views whose rows are all ",
                                      "[N, D] or all [T, H, D] with the same H (H < 2^30)"));
  }
  if (job.rows <= rows_launch::kMaxRowsPerLaunch) {
    rows_launch::launch_part<Kernel>(job, stream);
    return launch_status(op);
  }
  const int64_t part_rows = rows_launch::kMaxRowsPerLaunch / job.row_inner * job.row_inner;
  for (int64_t start = 0; start < job.rows; start += part_rows) {
    const int64_t count = job.rows - start < part_rows ? job.rows - start : part_rows;
    rows_launch::launch_part<Kernel>(
        rows_launch::job_part(job, start, count, Kernel::kScaleElement), stream);
    const Status status = launch_status(op);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda::quant
