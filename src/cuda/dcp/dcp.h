// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of the transport-free DCP functions (flashindexer/dist.h). Arguments arrive
// validated by src/api/dist.cpp, except what needs a host read of device data: those values are
// clamped or ignored on the device (see dist.h). `stream` is a cudaStream_t. Both ops are
// asynchronous on their stream, allocate nothing and are graph-capturable.
#pragma once

#include "flashindexer/dist.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

// candidates [rows, >= k] i64 (out) from logits [rows, width] f32/bf16, local_topk [rows, >= k]
// i32 and row_starts [rows] i32 (or undefined = 0).
Status dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                           const TensorView& local_topk, const TensorView& row_starts, int k,
                           int rank, const DcpGroup& group, void* stream);

// The same from scores [rows, >= k] f32 (scores[t, i] the score of local_topk[t, i]).
Status dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                       const TensorView& local_topk, int k, int rank,
                                       const DcpGroup& group, void* stream);

// out [rows, >= k] i32 (out), best first when sorted, else in ascending id order, from gathered
// [rows, N k] or [rows, N, k] i64. One CTA per row; no scratch.
Status dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                      bool sorted, void* stream);

}  // namespace flashindexer::cuda
