// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of the decode-length tensor ops (flashindexer/planning.h). Shapes, dtypes and
// devices arrive validated by src/api/decode_lens.cpp; the length values are not (they live on
// the device): the kernels clamp them as planning.h documents. `stream` is a cudaStream_t. Each
// op is one kernel, asynchronous on its stream, allocates nothing and is graph-capturable.
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "planning/decode_rule.h"

namespace flashindexer::cuda {

// row_lens [rows] i32 (out), row_to_request [rows] i32 (out) or undefined, from seq_lens and
// query_lens [requests] i32 or i64.
Status decode_flat_lens(const TensorView& row_lens, const TensorView& row_to_request,
                        const TensorView& seq_lens, const TensorView& query_lens, int next_n,
                        const planning::DecodeRule& rule, void* stream);

// lens [requests, next_n] i32 (out, row stride >= next_n) from seq_lens [requests] i32 or i64.
Status decode_native_lens(const TensorView& lens, const TensorView& seq_lens, int next_n,
                          const planning::DecodeRule& rule, void* stream);

}  // namespace flashindexer::cuda
