// SPDX-License-Identifier: Apache-2.0
// MXFP4 row quantization (spec §3.3, §2.4) on the GPU: one group of D/8 lanes per row, four
// lanes per block of 32 values.
//
// Each lane loads its eight values (16-byte loads), the block amax is two shuffles among the
// block's four lanes, and each lane stores its four packed bytes as one 4-byte store; the first
// lane of a block writes the block's scale byte. Launch shape as rows_fp8.cu.
#include "cuda/common/check.h"
#include "cuda/quantize/rows.h"

namespace flashindexer::cuda::quant {
namespace {

constexpr int kLanesPerBlock = kMxfp4BlockSize / kLaneValues;

template <typename In, int kLanes, bool kVector>
__global__ void __launch_bounds__(kBlockThreads) mxfp4_rows_kernel(const RowJob job) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * kBlockThreads + threadIdx.x;
  const int64_t row = thread / kLanes;
  const int lane = static_cast<int>(thread % kLanes);
  if (row >= job.rows) return;  // a row's lanes leave together
  const unsigned mask = group_mask<kLanes>();
  const Destination& to = job.destination;
  const int value_bytes = job.head_dim / 2;
  const int scale_count = job.head_dim / kMxfp4BlockSize;
  uint8_t* values;
  uint8_t* scales;
  if (to.slots != nullptr) {
    const int64_t slot = to.slots_i64 ? __ldg(static_cast<const int64_t*>(to.slots) + row)
                                      : __ldg(static_cast<const int32_t*>(to.slots) + row);
    if (slot < 0 || slot >= to.num_slots) return;
    uint8_t* page = to.cache + (slot / to.page_size) * to.page_stride;
    const int64_t in_page = slot % to.page_size;
    values = page + in_page * value_bytes;
    scales = page + static_cast<int64_t>(to.page_size) * value_bytes + in_page * scale_count;
  } else {
    values = to.values + to.value_rows.offset(row);
    scales = static_cast<uint8_t*>(to.scales) + to.scale_rows.offset(row);
  }
  float x[kLaneValues];
  load_lane<In, kVector>(x, static_cast<const In*>(job.input) + job.input_rows.offset(row) +
                                lane * kLaneValues);
  apply_rope<kLanes>(x, job.rope, row / job.rows_per_token, lane, mask);
  uint32_t scale_byte;
  const uint32_t word = mxfp4_codes(x, mask, &scale_byte);
  store_u32<kVector>(values + lane * (kLaneValues / 2), word);
  if (lane % kLanesPerBlock == 0) scales[lane / kLanesPerBlock] = static_cast<uint8_t>(scale_byte);
  const WeightFold& fold = job.weights;
  if (lane == 0 && fold.weights != nullptr) {
    const int64_t at = fold.weight_rows.offset(row);
    const float w = fold.weights_bf16 ? load_float(static_cast<const Bf16Bits*>(fold.weights) + at)
                                      : load_float(static_cast<const float*>(fold.weights) + at);
    fold.weights_out[fold.weights_out_rows.offset(row)] = __fmul_rn(w, fold.weight_scale);
  }
}

template <typename In, int kLanes>
void launch(const RowJob& job, unsigned blocks, cudaStream_t stream) {
  if (job.vector) {
    mxfp4_rows_kernel<In, kLanes, true><<<blocks, kBlockThreads, 0, stream>>>(job);
  } else {
    mxfp4_rows_kernel<In, kLanes, false><<<blocks, kBlockThreads, 0, stream>>>(job);
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

Status launch_mxfp4_rows(const RowJob& job, cudaStream_t stream, const char* op) {
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
