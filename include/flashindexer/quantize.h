// SPDX-License-Identifier: Apache-2.0
// Quantizers and dequantizers for keys (and, through the same kernels, for query heads).
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

// FP8 per-row quantization (spec §3.2): for each row r of `input`,
//   scale[r] = 2^ceil(log2(max(amax_r, 1e-4) / 448)),  values[r, d] = e4m3(input[r, d] / scale[r]).
// values: [N, D] e4m3 (out); scales: [N] f32 (out); input: [N, D] f32 or bf16.
Status quantize_k_fp8(const TensorView& values, const TensorView& scales, const TensorView& input,
                      const RunOptions& options = {});

// out[r, d] = e4m3(values[r, d]) * scales[r].
// out: [N, D] f32 (out); values: [N, D] e4m3; scales: [N] f32. Runs on CPU or CUDA tensors.
Status dequantize_k_fp8(const TensorView& out, const TensorView& values, const TensorView& scales,
                        const RunOptions& options = {});

// MXFP4 quantization (spec §3.3) over blocks of 32 consecutive elements of the last dimension:
//   e = clamp(ceil(log2(max(amax, 6 * 2^-126) / 6)), -127, 127),  scale byte = e + 127,
//   code = E2M1 round-to-nearest-even-saturating(x / 2^e); element 2i in the low nibble.
// values: [..., D/2] e2m1x2 (out); scales: [..., D/32] ue8m0 (out); input: [..., D] f32 or bf16,
// D a multiple of 32. Rank 2 or 3 (e.g. keys [N, D] or query heads [M, H, D]).
Status quantize_mxfp4(const TensorView& values, const TensorView& scales, const TensorView& input,
                      const RunOptions& options = {});

// out[..., d] = e2m1(values) * 2^(scale byte - 127).
// out: [..., D] f32 (out); values: [..., D/2] e2m1x2; scales: [..., D/32] ue8m0.
Status dequantize_mxfp4(const TensorView& out, const TensorView& values, const TensorView& scales,
                        const RunOptions& options = {});

}  // namespace flashindexer
