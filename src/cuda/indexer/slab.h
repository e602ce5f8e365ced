// SPDX-License-Identifier: Apache-2.0
// The CUDA indexer's use of the caller's workspace: the top-k scratch, then a logits slab for a
// batch of rows (and, for the fused path, a region it keeps for its per-row arrays). Host code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/checks.h"
#include "cuda/cuda_ops.h"

namespace flashindexer::cuda {

// Logits rows start 1 KiB apart (the scoring kernel's stores are then whole sectors).
constexpr int64_t kSlabPitchFloats = 256;
constexpr size_t kSlabAlignment = 1024;

// Rows [first, first + count) of a view along its dimension 0 (undefined views stay undefined).
inline TensorView leading_rows(const TensorView& view, int64_t first, int64_t count) {
  if (!view.defined()) return view;
  TensorView part = view;
  part.data = static_cast<unsigned char*>(view.data) +
              first * view.stride[0] * static_cast<int64_t>(dtype_size(view.dtype));
  part.shape[0] = count;
  return part;
}

// Floats between logits rows of a slab for rows of `width` keys.
inline int64_t slab_pitch(int64_t width) {
  return (std::max<int64_t>(width, 1) + kSlabPitchFloats - 1) / kSlabPitchFloats * kSlabPitchFloats;
}

inline size_t align_slab(size_t bytes) {
  return (bytes + kSlabAlignment - 1) / kSlabAlignment * kSlabAlignment;
}

// The logits slab and the top-k scratch carved out of the caller's workspace.
struct Slab {
  float* logits = nullptr;
  int64_t pitch = 0;              // floats between logits rows
  int64_t rows = 0;               // logits rows the slab holds (a multiple of the row unit)
  RunOptions topk_run;            // the caller's stream, the top-k scratch as workspace
  size_t logits_bytes = 0;        // bytes from `logits` on that the slab may use
  unsigned char* kept = nullptr;  // the region kept for the caller, `kept_bytes` long, aligned
  size_t kept_bytes = 0;
};

// Carves the workspace for rows of `width` logits, a whole number of `row_unit` rows per batch,
// keeping `keep(slab_region_bytes)` bytes of the region after the top-k scratch for the caller
// (who needs at least `keep_minimum`). A caller that also lays its own arrays over the logits
// while they are not live (the fused path) needs at least `overlay_minimum` bytes there.
template <typename Keep>
Status carve_slab(const char* op, const RunOptions& options, int64_t width, int k, int64_t row_unit,
                  size_t keep_minimum, size_t overlay_minimum, Keep keep, Slab* slab) {
  const size_t topk_bytes = topk_per_row_workspace_bound(k);
  slab->pitch = slab_pitch(width);
  const size_t unit_bytes = static_cast<size_t>(row_unit) * slab->pitch * sizeof(float);
  const size_t logits_minimum = std::max(unit_bytes, align_slab(overlay_minimum));
  const size_t needed = topk_bytes + kSlabAlignment + logits_minimum +
                        (keep_minimum > 0 ? align_slab(keep_minimum) + kSlabAlignment : 0);
  if (options.workspace == nullptr || options.workspace_bytes < needed) {
    return Status::WorkspaceTooSmall(concat(
        op, ": CUDA tensors need RunOptions.workspace for the logits of a batch of rows: at least ",
        needed, " bytes for ", width, " keys per row (", row_unit,
        " rows at a time); indexer_cuda_workspace_size(k=", k, ") = ", indexer_workspace_size(k),
        " is the recommended size; got ",
        options.workspace == nullptr ? 0 : options.workspace_bytes, " bytes"));
  }
  if (reinterpret_cast<uintptr_t>(options.workspace) % 16 != 0) {
    return Status::InvalidArgument(
        concat(op, ": RunOptions.workspace must be 16-byte aligned for CUDA tensors"));
  }
  auto* base = static_cast<unsigned char*>(options.workspace);
  const uintptr_t slab_start =
      (reinterpret_cast<uintptr_t>(base) + topk_bytes + kSlabAlignment - 1) / kSlabAlignment *
      kSlabAlignment;
  size_t region = options.workspace_bytes - (slab_start - reinterpret_cast<uintptr_t>(base));
  if (keep_minimum > 0) {
    const size_t kept = std::clamp(align_slab(keep(region)), align_slab(keep_minimum),
                                   region - logits_minimum - kSlabAlignment);
    slab->kept_bytes = kept;
    region -= kept;
    slab->kept =
        reinterpret_cast<unsigned char*>(slab_start) + region / kSlabAlignment * kSlabAlignment;
    region = region / kSlabAlignment * kSlabAlignment;
  }
  slab->logits = reinterpret_cast<float*>(slab_start);
  slab->logits_bytes = region;
  slab->rows = static_cast<int64_t>(region / unit_bytes) * row_unit;
  slab->topk_run = options;
  slab->topk_run.workspace = base;
  slab->topk_run.workspace_bytes = topk_bytes;
  return Status::Ok();
}

// The rows a workspace holds after its first `fixed` bytes at `per_row` bytes a row, a whole
// number of `row_unit` rows (the consumer indexers' row batches): WorkspaceTooSmall when not one
// unit fits (`call` names the call and its shape; the message continues with what it needs),
// InvalidArgument when the workspace is not 16-byte aligned.
inline Status rows_that_fit(const char* op, const RunOptions& options, int k, size_t fixed,
                            size_t per_row, int64_t row_unit, const std::string& call,
                            int64_t* rows) {
  const size_t available = options.workspace == nullptr || options.workspace_bytes < fixed
                               ? 0
                               : options.workspace_bytes - fixed;
  *rows = static_cast<int64_t>(available / per_row) / row_unit * row_unit;
  if (*rows < row_unit) {
    return Status::WorkspaceTooSmall(concat(
        op, ": ", call, " needs RunOptions.workspace of at least ", fixed + per_row * row_unit,
        " bytes (", row_unit, " rows at a time); indexer_cuda_workspace_size(k=", k,
        ") = ", indexer_workspace_size(k), " is the recommended size; got ",
        options.workspace == nullptr ? 0 : options.workspace_bytes, " bytes"));
  }
  if (reinterpret_cast<uintptr_t>(options.workspace) % 16 != 0) {
    return Status::InvalidArgument(
        concat(op, ": RunOptions.workspace must be 16-byte aligned for CUDA tensors"));
  }
  return Status::Ok();
}

// An MXFP4 prefill call's operands as e4m3 (cuda::mqa_logits_workspace_size bytes) at the end of
// the caller's workspace. With them each row batch is scored by the FP8 kernel instead of the
// converting one (H200, H64 4096 x 131072: 8.4 against 14.4 ms, docs/history/mxfp4-scoring.md),
// with the same bits, and the keys are converted by the first batch only (keys_ready).
struct ConvertedOperands {
  void* workspace = nullptr;  // null: the batches convert on chip
  size_t bytes = 0;
  bool keys_ready = false;
  int* keys_flagged = nullptr;  // with a flag word asked for (the fused path's, gate.h)
};

// Carves the row batches of a prefill call with carve(options, batches) (a Status; Batches has
// `rows`, the rows a batch holds). For an MXFP4 call it then carves them again from the workspace
// less the converted operands of a batch, and keeps that when a batch still holds at least
// `min_rows` rows (or all of them); otherwise the batches convert on chip, in the larger slab.
// with_flag: a word for ConvertedOperands::keys_flagged too, before the operands.
template <typename Batches, typename Carve>
Status carve_prefill_batches(const RunOptions& options, const QuantizedTensor& q, int64_t num_keys,
                             int64_t min_rows, Carve carve, Batches* batches,
                             ConvertedOperands* converted, bool with_flag = false) {
  if (Status status = carve(options, batches); !status.ok()) return status;
  const int64_t rows = q.values.shape[0];
  if (q.values.dtype != DType::kE2M1x2 || rows == 0 || num_keys == 0) return Status::Ok();
  constexpr size_t kFlagBytes = 256;
  const size_t needed = mqa_logits_workspace_size(std::min(batches->rows, rows),
                                                  static_cast<int>(q.values.shape[1]), num_keys);
  const size_t region = needed + (with_flag ? kFlagBytes : 0);
  if (options.workspace_bytes <= region) return Status::Ok();
  RunOptions rest = options;
  rest.workspace_bytes = options.workspace_bytes - region;
  Batches fewer;
  if (!carve(rest, &fewer).ok() || fewer.rows < std::min(min_rows, rows)) return Status::Ok();
  *batches = fewer;
  unsigned char* start = static_cast<unsigned char*>(options.workspace) + rest.workspace_bytes;
  if (with_flag) {
    converted->keys_flagged =
        reinterpret_cast<int*>((reinterpret_cast<uintptr_t>(start) + 15) / 16 * 16);
    start += kFlagBytes;
  }
  converted->workspace = start;
  converted->bytes = needed;
  return Status::Ok();
}

inline TensorView slab_view(const Slab& slab, int64_t rows, int64_t width) {
  return TensorView::contiguous(slab.logits, DType::kF32, {rows, width}, Device::kCUDA)
      .with_row_stride(slab.pitch);
}

}  // namespace flashindexer::cuda
