// SPDX-License-Identifier: Apache-2.0
// Selection: the k best visible keys of every row.
//
// The total order (the same on every backend, so every path returns exactly the same set):
//   1. larger score first; -0.0 and +0.0 are equal;
//   2. NaN ranks below -inf, and all NaNs are equal;
//   3. equal scores: the smaller key index first.
// Output values are relative to the row start (s - ks[t]; the context position in the decode
// form). A row with n visible keys fills min(n, k) leading slots and writes -1 into the rest of
// its k slots; columns k and beyond of a wider output row are not touched.
#pragma once

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

inline constexpr int kMaxTopK = 4096;

// Which columns of a row are visible.
struct RowRanges {
  // Prefill form: row t sees columns ks[t] <= s < ke[t]; both [rows] i32.
  TensorView ks;
  TensorView ke;
  // Decode form: lengths [rows] i32 (row r sees s < lengths[r]), or [B] i32 with next_n
  // rows per request (row r sees s < lengths[r / next_n] - next_n + r % next_n + 1).
  // Lengths must be non-negative; a row whose formula gives a negative length sees no key.
  TensorView lengths;
  int next_n = 1;

  static RowRanges prefill(const TensorView& ks, const TensorView& ke) {
    RowRanges r;
    r.ks = ks;
    r.ke = ke;
    return r;
  }
  static RowRanges decode(const TensorView& lengths, int next_n = 1) {
    RowRanges r;
    r.lengths = lengths;
    r.next_n = next_n;
    return r;
  }
  bool is_prefill() const { return ks.defined(); }
};

struct TopKOptions {
  // Emit the selected keys in the total order (best first); when false, in ascending index
  // order. Either way a row's answer is the same bits on every backend, on every run and in
  // every batch composition (however many rows the call has, so however the row is split
  // across CTAs or threads).
  bool sorted = false;
};

// out: [rows, >= k] i32 (out); logits: [rows, width] f32 or bf16 (row stride >= width);
// 1 <= k <= 4096. Visible columns must lie inside [0, width).
//
// CUDA tensors: asynchronous on options.cuda_stream, no host synchronization and no allocation,
// so a call can be captured in a CUDA graph; the output is bit-identical from run to run. The
// values of ks/ke/lengths live on the device and are not checked (that would need a sync): a
// range outside [0, width] is clamped to it on the device, never read out of bounds, and gives
// the answer for the clamped range. When rows are too few to fill the GPU, rows are split
// across CTAs; with k > 2048 that needs options.workspace with
// topk_per_row_cuda_workspace_size() bytes (16-byte aligned), and without it the call returns
// kWorkspaceTooSmall. Pass the size the query returns for the shape: it may be 0.
Status topk_per_row(const TensorView& out, const TensorView& logits, const RowRanges& ranges, int k,
                    const TopKOptions& topk_options = {}, const RunOptions& options = {});

// Scratch bytes topk_per_row needs for CUDA logits of [rows, width] and this k on the current
// device (0 when every row runs in one CTA or k <= 2048; always 0 in a build without CUDA).
size_t topk_per_row_cuda_workspace_size(int64_t rows, int64_t width, int k);

}  // namespace flashindexer

namespace flashindexer {

// Scratch bytes topk_per_row uses on CPU logits at this k with `threads` CPU threads (0 = the
// OpenMP default); independent of rows and width. Without options.workspace the CPU path
// allocates this much per call.
size_t topk_per_row_cpu_workspace_size(int k, int threads = 0);

}  // namespace flashindexer
