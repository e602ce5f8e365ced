// SPDX-License-Identifier: Apache-2.0
// One kernel per format quantizes rows of D values wherever they come from and go: a [N, D]
// or [T, H, D] view into a view (quantize_k_fp8, quantize_mxfp4, the query quantizers) or keys
// into their slots of the paged cache (insert_k_cache), with RoPE before and the query weights
// folded after when asked. A job says which; the kernels are in rows_fp8.cu and rows_mxfp4.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quantize/lanes.cuh"
#include "flashindexer/status.h"

namespace flashindexer::cuda::quant {

// Where row r's codes and scales go.
struct Destination {
  // A view: values row r at values + value_rows.offset(r) (bytes); its scale(s) at
  // scales + scale_rows.offset(r) (f32 elements for FP8, bytes for MXFP4).
  uint8_t* values = nullptr;
  Rows value_rows;
  void* scales = nullptr;
  Rows scale_rows;
  // Or the paged cache (slots != nullptr): row r into slot slots[r]; slots < 0 or at or past
  // num_slots are skipped.
  const void* slots = nullptr;
  bool slots_i64 = false;
  uint8_t* cache = nullptr;
  int64_t page_stride = 0;
  int page_size = 0;
  int64_t num_slots = 0;
};

// The query weights: weights_out[r] = weights[r] * (sigma_r for FP8) * weight_scale.
struct WeightFold {
  const void* weights = nullptr;  // null: no weights
  bool weights_bf16 = false;
  Rows weight_rows;
  float* weights_out = nullptr;
  Rows weights_out_rows;
  float weight_scale = 1.0f;
};

struct RowJob {
  const void* input = nullptr;
  bool input_bf16 = false;
  Rows input_rows;
  int64_t rows = 0;
  int head_dim = 0;
  int64_t rows_per_token = 1;  // RoPE position of row r: positions[r / rows_per_token]
  float floor = 1e-4f;         // FP8: the amax floor
  bool vector = false;         // every row and destination allows the lanes' vector accesses
  Rope rope;
  Destination destination;
  WeightFold weights;
};

// Head dims the kernels take: D/8 lanes per row, a power of two up to a warp.
inline bool head_dim_supported(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

Status launch_fp8_rows(const RowJob& job, cudaStream_t stream, const char* op);
Status launch_mxfp4_rows(const RowJob& job, cudaStream_t stream, const char* op);

}  // namespace flashindexer::cuda::quant
