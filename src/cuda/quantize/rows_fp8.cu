// SPDX-License-Identifier: Apache-2.0
// FP8 row quantization (spec §3.2, §2.3) on the GPU: one group of D/8 lanes per row.
//
// Memory-bound (2 or 4 bytes in, 1 out per value): each lane issues its 16-byte load(s) at once,
// the row amax is log2(D/8) shuffles, and each lane stores its eight codes as one 8-byte store;
// lane 0 of the group writes the row's scale (and folded weight). 256 threads per block, one
// row group per thread group, no loop: a 1M-key insert is 64K blocks of full occupancy.
#include "cuda/common/check.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda::quant {
namespace {

template <typename In, int kLanes, bool kVector>
__global__ void __launch_bounds__(kBlockThreads) fp8_rows_kernel(const RowJob job) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const int64_t row = thread / kLanes;
  const int lane = static_cast<int>(thread % kLanes);
  if (row >= job.rows) return;  // a row's lanes leave together
  const unsigned mask = group_mask<kLanes>();
  const Destination& to = job.destination;
  uint8_t* values;
  uint8_t* scale_bytes = nullptr;  // the cache's scale slot
  float* scale_out = nullptr;      // or the scales view's element, if any
  if (to.slots != nullptr) {
    const int64_t slot = to.slots_i64 ? __ldg(static_cast<const int64_t*>(to.slots) + row)
                                      : __ldg(static_cast<const int32_t*>(to.slots) + row);
    if (slot < 0 || slot >= to.num_slots) return;
    uint8_t* page = to.cache + (slot / to.page_size) * to.page_stride;
    const int64_t in_page = slot % to.page_size;
    values = page + in_page * job.head_dim;
    scale_bytes = page + static_cast<int64_t>(to.page_size) * job.head_dim + in_page * 4;
  } else {
    values = to.values + to.value_rows.offset(row);
    if (to.scales != nullptr) scale_out = static_cast<float*>(to.scales) + to.scale_rows.offset(row);
  }
  float x[kLaneValues];
  load_lane<In, kVector>(x, static_cast<const In*>(job.input) + job.input_rows.offset(row) +
                                lane * kLaneValues);
  apply_rope<kLanes>(x, job.rope, row / job.rows_per_token, lane, mask);
  const float scale = fp8_row_scale<kLanes>(x, job.floor, mask);
  store_u64<kVector>(values + lane * kLaneValues, fp8_codes(x, scale));
  if (lane != 0) return;
  if (scale_bytes != nullptr) store_u32<kVector>(scale_bytes, __float_as_uint(scale));
  if (scale_out != nullptr) *scale_out = scale;  // the query form folds it into the weights
  const WeightFold& fold = job.weights;
  if (fold.weights != nullptr) {
    const int64_t at = fold.weight_rows.offset(row);
    const float w = fold.weights_bf16 ? load_float(static_cast<const Bf16Bits*>(fold.weights) + at)
                                      : load_float(static_cast<const float*>(fold.weights) + at);
    fold.weights_out[fold.weights_out_rows.offset(row)] =
        __fmul_rn(__fmul_rn(w, scale), fold.weight_scale);
  }
}

template <typename In, int kLanes>
void launch(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  if (job.vector) {
    fp8_rows_kernel<In, kLanes, true><<<blocks, kBlockThreads, 0, stream>>>(job);
  } else {
    fp8_rows_kernel<In, kLanes, false><<<blocks, kBlockThreads, 0, stream>>>(job);
  }
}

template <typename In>
void launch_by_dim(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  switch (job.head_dim) {
    case 32: return launch<In, 4>(job, blocks, stream);
    case 64: return launch<In, 8>(job, blocks, stream);
    case 128: return launch<In, 16>(job, blocks, stream);
    default: return launch<In, 32>(job, blocks, stream);
  }
}

}  // namespace

Status launch_fp8_rows(const RowJob& job, cudaStream_t stream, const char* op) {
  if (job.rows == 0) return Status::Ok();
  const int64_t threads = job.rows * (job.head_dim / kLaneValues);
  const unsigned blocks = static_cast<unsigned>((threads + kBlockThreads - 1) / kBlockThreads);
  if (job.input_bf16) {
    launch_by_dim<Bf16Bits>(job, blocks, stream);
  } else {
    launch_by_dim<float>(job, blocks, stream);
  }
  return launch_status(op);
}

}  // namespace flashindexer::cuda::quant
