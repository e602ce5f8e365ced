// SPDX-License-Identifier: Apache-2.0
// The consumer's selection on dense logits (candidate_topk_per_row), over scratch the caller has
// already carved: shared by the public op and the consumer indexer's row batches. Host code.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/candidates/rows.cuh"
#include "flashindexer/candidates.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda::candidates {

// Logits rows [rows, width] f32 with a row stride, on the device.
struct LogitsRows {
  float* data;
  int64_t stride;
  int64_t rows;
  int64_t width;
};

// Candidate rows [rows, C] i32 on the device.
struct CandidateRowsOnDevice {
  const int32_t* data;
  int64_t stride;
  int count;  // C
  int block_size;
};

// The candidate rows of a consumer call from its query row `first` on.
inline CandidateRowsOnDevice candidate_rows_of(const CandidateInput& input, int64_t first) {
  return {input.blocks.ptr<const int32_t>() + first * input.blocks.stride[0],
          input.blocks.stride[0], static_cast<int>(input.blocks.shape[1]), input.block_size};
}

// The scratch of one call: exact mode uses blocks, lengths and compact; the vLLM-compatible mode
// uses row_starts and row_ends; both pass topk_run (stream + the top-k's scratch) to the top-k.
struct ConsumerScratch {
  int32_t* blocks = nullptr;   // [rows, C]
  int32_t* lengths = nullptr;  // [rows]
  float* compact = nullptr;    // [rows, compact_pitch]
  int64_t compact_pitch = 0;
  int32_t* row_starts = nullptr;  // [rows]
  int32_t* row_ends = nullptr;    // [rows]
  RunOptions topk_run;
};

// Bytes of the arrays of ConsumerScratch for `rows` rows (each 256-byte aligned), without the
// top-k's scratch; compact_pitch_of gives the compact matrix's row pitch.
int64_t compact_pitch_of(int num_blocks, int block_size);
size_t consumer_array_bytes(int64_t rows, int num_blocks, int block_size);
// Lays the arrays of `rows` rows from `base` on (256-byte aligned, consumer_array_bytes long).
ConsumerScratch carve_consumer_arrays(void* base, int64_t rows, int num_blocks, int block_size);

// out [rows, >= k] i32 (row stride out_stride): the consumer's top-k of each row. The
// vLLM-compatible mode masks `logits` in place.
Status run_consumer(const char* op, int32_t* out, int64_t out_stride, const LogitsRows& logits,
                    const BoundRows& bounds, const CandidateRowsOnDevice& candidates, int k,
                    bool sorted, bool vllm_compatible, const ConsumerScratch& scratch);

}  // namespace flashindexer::cuda::candidates
