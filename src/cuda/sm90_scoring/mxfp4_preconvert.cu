// SPDX-License-Identifier: Apache-2.0
// MXFP4 prefill scoring through the FP8 kernel: when the caller's workspace holds the operands as
// e4m3, one pass converts the packed keys and queries there, and the FP8 prefill kernel scores
// them. The pass computes what the converting format's warps write into their stages
// (format_mxfp4.cuh): each vector's blocks shifted from its reference exponent (the largest scale
// over its non-zero blocks) into e4m3, in the natural k order, and its remaining power of two as
// the key's fp32 scale or folded into the query's weight (NaN when out of span, which the fix-up
// recomputes). The FP8 kernel then reads the very bytes, scales and weights the converting kernel
// computes with, through the same consumer code, so the logits have the same bits; its producer
// has no conversion to wait for (H64 4096 x 131072: the converting kernel 14.4 ms, FP8 8.4 ms).
// Device side: the conversion kernel; host side: the workspace layout and the call
// (launch_mqa_logits_preconverted, call.h), which mqa_logits (launch.cu) takes with a workspace.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/format_mxfp4.cuh"

namespace flashindexer::cuda::scoring {
namespace {

constexpr int kThreads = 256;

// The outputs of the conversion: e4m3 keys_out [num_keys, 128] with fp32 key_scales_out
// [num_keys], e4m3 q_out [rows, heads, 128] and weights_out [rows, heads] (the weights times each
// query vector's power of two); out-of-span vectors NaN and flagged in out_of_span.
struct Mxfp4Preconvert {
  int64_t rows = 0;
  int64_t num_keys = 0;
  uint8_t* keys_out = nullptr;
  float* key_scales_out = nullptr;
  uint8_t* q_out = nullptr;
  float* weights_out = nullptr;
  int* out_of_span = nullptr;   // Mxfp4Params::out_of_span
  int* keys_flagged = nullptr;  // optional: set when a key vector is out of span
};

// Vector v of `vectors` (row v / heads, head v % heads) is converted by four consecutive lanes,
// lane % 4 = block; the warp stays converged (mxfp4::BlockShift shuffles and votes), so lanes past
// the vectors convert a zero block and store nothing.
struct Vectors {
  const uint8_t* values;  // packed E2M1, row / head strides in bytes
  int64_t row_stride;
  int64_t head_stride;
  const uint8_t* scales;  // UE8M0, a vector's four contiguous, heads 4 bytes apart
  int64_t scale_row_stride;
  int64_t vectors;
  int heads;
  uint8_t* out;  // e4m3 [vectors, 128]
  // Keys: the remaining power of two of vector v at key_scales[v]. Queries: weights_out[v] =
  // weights[row * weights_stride + head] times it.
  float* key_scales;
  const float* weights;
  int64_t weights_stride;
  float* weights_out;
  int* out_of_span;
  int* flagged;  // optional: this conversion's own flag
};

__global__ void __launch_bounds__(kThreads) convert_vectors_kernel(const Vectors p) {
  const int b = threadIdx.x % 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kThreads / 4;
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 4;
  const int64_t rounds = (p.vectors + step - 1) / step;  // the same for every lane
#pragma unroll 1
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t v = first + round * step;
    const bool present = v < p.vectors;
    const int64_t row = present ? v / p.heads : 0;
    const int head = present ? static_cast<int>(v % p.heads) : 0;
    uint4 block = make_uint4(0, 0, 0, 0);
    uint32_t scale = 0;  // this block's byte (the scales may lie at any byte)
    if (present) {
      block = *reinterpret_cast<const uint4*>(p.values + row * p.row_stride + head * p.head_stride +
                                              b * mxfp4::kBlockBytes);
      scale = p.scales[row * p.scale_row_stride + head * 4 + b];
    }
    const mxfp4::BlockShift shift(block, scale << (8 * b), b);
    const uint2 table = mxfp4::magnitude_table(shift.shift);
    if (!present) continue;
    const uint2 e0 = mxfp4::expand_word(block.x, table);
    const uint2 e1 = mxfp4::expand_word(block.y, table);
    const uint2 e2 = mxfp4::expand_word(block.z, table);
    const uint2 e3 = mxfp4::expand_word(block.w, table);
    auto* out = reinterpret_cast<uint4*>(p.out + v * kHeadDim + 32 * b);
    out[0] = make_uint4(e0.x, e0.y, e1.x, e1.y);
    out[1] = make_uint4(e2.x, e2.y, e3.x, e3.y);
    if (b == 0) {
      if (p.key_scales != nullptr) {
        p.key_scales[v] = shift.remaining_scale(mxfp4::kKeyScaleBias);
      } else {
        p.weights_out[v] = p.weights[row * p.weights_stride + head] *
                           shift.remaining_scale(mxfp4::kQueryScaleBias);
      }
      if (shift.flagged) {
        mxfp4::note_out_of_span({nullptr, 0, p.out_of_span});
        if (p.flagged != nullptr) *p.flagged = 1;
      }
    }
  }
}

cudaError_t launch_vectors(const Vectors& p, int sms, cudaStream_t stream) {
  if (p.vectors == 0) return cudaSuccess;
  constexpr int kCtasPerSm = 8;
  const int64_t needed = (p.vectors * 4 + kThreads - 1) / kThreads;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(needed, int64_t{kCtasPerSm} * sms));
  convert_vectors_kernel<<<grid, kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// The raw operands of the call (`raw`, the fix-up's view of them) converted into `out`.
cudaError_t launch_mxfp4_preconvert(const Mxfp4Fixup& raw, const Mxfp4Preconvert& out, int sms,
                                    cudaStream_t stream) {
  // In Vectors' field order; the keys are vectors of one "head" a row, with scales out.
  const Vectors keys{raw.k_values,           raw.k_row_stride, 0, raw.k_scales,
                     raw.k_scale_row_stride, out.num_keys,     1, out.keys_out,
                     out.key_scales_out,     nullptr,          0, nullptr,
                     out.out_of_span,        out.keys_flagged};
  if (const cudaError_t error = launch_vectors(keys, sms, stream); error != cudaSuccess) {
    return error;
  }
  // The queries: (row, head) vectors, into weights_out.
  const Vectors q{raw.q_values,
                  raw.q_row_stride,
                  raw.q_head_stride,
                  raw.q_scales,
                  raw.q_scale_row_stride,
                  out.rows * raw.heads,
                  raw.heads,
                  out.q_out,
                  nullptr,
                  raw.weights,
                  raw.weights_row_stride,
                  out.weights_out,
                  out.out_of_span,
                  nullptr};
  return launch_vectors(q, sms, stream);
}

}  // namespace
}  // namespace flashindexer::cuda::scoring

namespace flashindexer::cuda {
namespace {

using scoring::kHeadDim;
using scoring::ScoringCall;

// The workspace of an MXFP4 prefill call through the FP8 kernel: e4m3 keys, their fp32 scales,
// e4m3 queries and the weights, each region 256-byte aligned.
struct PreconvertLayout {
  size_t keys = 0;
  size_t key_scales = 0;
  size_t q = 0;
  size_t weights = 0;
  size_t bytes = 0;
};

PreconvertLayout preconvert_layout(int64_t rows, int heads, int64_t num_keys) {
  constexpr size_t kAlign = 256;
  auto up = [](size_t n) { return (n + kAlign - 1) / kAlign * kAlign; };
  const auto vectors = static_cast<size_t>(rows) * static_cast<size_t>(heads);
  PreconvertLayout l;
  l.keys = 0;
  l.key_scales = up(static_cast<size_t>(num_keys) * kHeadDim);
  l.q = l.key_scales + up(static_cast<size_t>(num_keys) * 4);
  l.weights = l.q + up(vectors * kHeadDim);
  l.bytes = kAlign + l.weights + up(vectors * 4);  // the leading kAlign: the base's alignment
  return l;
}

}  // namespace

Status preconvert_mxfp4_operands(const char* op, const ScoringCall& call, const QuantizedTensor& q,
                                 const QuantizedTensor& keys, void* workspace,
                                 size_t workspace_bytes, bool* keys_ready, int* keys_flagged,
                                 void* stream, PreconvertedOperands* out) {
  const int64_t rows = q.values.shape[0];
  const int heads = static_cast<int>(q.values.shape[1]);
  const int64_t num_keys = keys.values.shape[0];
  const PreconvertLayout l = preconvert_layout(rows, heads, num_keys);
  if (workspace_bytes < l.bytes) {
    return Status::WorkspaceTooSmall(
        concat(op, ": an MXFP4 call with RunOptions.workspace needs at least ", l.bytes,
               " bytes (mqa_logits_cuda_workspace_size(rows, H, keys)); got ", workspace_bytes));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(workspace);
  auto* base = reinterpret_cast<uint8_t*>((start + 255) / 256 * 256);
  scoring::Mxfp4Preconvert c;
  c.rows = rows;
  // The queries' region starts after the keys' whatever the rows (preconvert_layout), so the
  // keys an earlier batch converted stay where this call reads them.
  const bool convert_keys = keys_ready == nullptr || !*keys_ready;
  c.num_keys = convert_keys ? num_keys : 0;
  c.keys_out = base + l.keys;
  c.key_scales_out = reinterpret_cast<float*>(base + l.key_scales);
  c.q_out = base + l.q;
  c.weights_out = reinterpret_cast<float*>(base + l.weights);
  c.out_of_span = call.format.out_of_span;
  c.keys_flagged = keys_flagged;
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  if (convert_keys && keys_flagged != nullptr) {
    if (Status status = to_status(cudaMemsetAsync(keys_flagged, 0, sizeof(int), cuda_stream), op,
                                  "MXFP4 key flag reset");
        !status.ok()) {
      return status;
    }
  }
  if (Status status =
          to_status(scoring::launch_mxfp4_preconvert(call.fixup, c, call.sms, cuda_stream), op,
                    "MXFP4 conversion kernel launch");
      !status.ok()) {
    return status;
  }
  if (keys_ready != nullptr) *keys_ready = true;
  out->q = {TensorView::contiguous(c.q_out, DType::kE4M3, {rows, heads, kHeadDim}, Device::kCUDA),
            {}};
  out->keys = {
      TensorView::contiguous(c.keys_out, DType::kE4M3, {num_keys, kHeadDim}, Device::kCUDA),
      TensorView::contiguous(c.key_scales_out, DType::kF32, {num_keys}, Device::kCUDA)};
  out->weights = TensorView::contiguous(c.weights_out, DType::kF32, {rows, heads}, Device::kCUDA);
  return Status::Ok();
}

Status preconvert_mxfp4_rows(const char* op, const TensorView& logits, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, void* workspace,
                             size_t workspace_bytes, bool* keys_ready, int* keys_flagged,
                             void* stream, PreconvertedOperands* out) {
  ScoringCall raw;
  if (Status status = plan_mqa_logits(op, logits, q, keys, weights, ks, ke, &raw); !status.ok()) {
    return status;
  }
  return preconvert_mxfp4_operands(op, raw, q, keys, workspace, workspace_bytes, keys_ready,
                                   keys_flagged, stream, out);
}

Status plan_preconverted(const char* op, const ScoringCall& call,
                         const PreconvertedOperands& operands, const TensorView& logits,
                         const TensorView& ks, const TensorView& ke, ScoringCall* fp8) {
  if (Status status =
          plan_mqa_logits(op, logits, operands.q, operands.keys, operands.weights, ks, ke, fp8);
      !status.ok()) {
    return status;
  }
  fp8->fixup_after = true;
  fp8->fixup = call.fixup;
  return Status::Ok();
}

// Converts the planned MXFP4 call's operands into the workspace, scores them with the FP8
// kernel, then runs the MXFP4 call's fix-up (its raw operands, the same logits and ranges).
Status launch_mqa_logits_preconverted(const char* op, const ScoringCall& call,
                                      const TensorView& logits, const QuantizedTensor& q,
                                      const QuantizedTensor& keys, const TensorView& ks,
                                      const TensorView& ke, bool clean, void* workspace,
                                      size_t workspace_bytes, bool* keys_ready, void* stream) {
  PreconvertedOperands operands;
  if (Status status = preconvert_mxfp4_operands(op, call, q, keys, workspace, workspace_bytes,
                                                keys_ready, nullptr, stream, &operands);
      !status.ok()) {
    return status;
  }
  ScoringCall fp8;
  if (Status status = plan_preconverted(op, call, operands, logits, ks, ke, &fp8); !status.ok()) {
    return status;
  }
  return launch_scoring(op, fp8, clean, stream);
}

size_t mqa_logits_workspace_size(int64_t rows, int heads, int64_t num_keys) {
  return preconvert_layout(rows, heads, num_keys).bytes;
}

}  // namespace flashindexer::cuda
