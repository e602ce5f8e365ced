// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of the planning tensor ops (flashindexer/planning.h): a chunk's row bounds and
// the decode lengths. Shapes, dtypes, devices and the chunk's ranges arrive validated by
// src/api/planning_tensors.cpp; the length values are not (they live on the device): the kernels
// clamp them as planning.h documents. `stream` is a cudaStream_t. Each
// op is one kernel, asynchronous on its stream, allocates nothing and is graph-capturable.
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "planning/decode_rule.h"

namespace flashindexer::cuda {

// A prefill chunk as the kernel needs it (flashindexer/planning.h's PrefillChunk is C++20 host
// code): its requests [request_begin, request_end) and its first query row within the group.
struct ChunkRows {
  int64_t request_begin = 0;
  int64_t request_end = 0;
  int64_t query_begin = 0;
};

// ks, ke [chunk rows] i32 (out), token_to_seq [entries] i32 (out) or undefined, from seq_lens and
// query_lens [requests] i32 or i64 (requests >= chunk.request_end).
Status prefill_row_bounds(const TensorView& ks, const TensorView& ke,
                          const TensorView& token_to_seq, const ChunkRows& chunk,
                          const TensorView& seq_lens, const TensorView& query_lens,
                          const planning::DecodeRule& rule, void* stream);

// row_lens [rows] i32 (out), row_to_request [rows] i32 (out) or undefined, from seq_lens and
// query_lens [requests] i32 or i64.
Status decode_flat_lens(const TensorView& row_lens, const TensorView& row_to_request,
                        const TensorView& seq_lens, const TensorView& query_lens, int next_n,
                        const planning::DecodeRule& rule, void* stream);

// lens [requests, next_n] i32 (out, row stride >= next_n) from seq_lens [requests] i32 or i64.
Status decode_native_lens(const TensorView& lens, const TensorView& seq_lens, int next_n,
                          const planning::DecodeRule& rule, void* stream);

}  // namespace flashindexer::cuda
