// The CUDA indexer over a fixed logits slab: rows run in batches, and each batch is the dense
// pair the op must equal bit for bit -- mqa_logits (paged_mqa_logits) into the slab, then
// topk_per_row over it -- so the result is topk_per_row(logits) by construction, for any batch
// size. The slab is the caller's workspace, so memory never grows with rows or keys; the batches
// follow from shapes only (no host sync, graph-capturable). Host code only.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/cuda_ops.h"

namespace flashindexer::cuda {
namespace {

// The recommended slab: 512 prefill rows of 128K keys, or a whole 64 x 128K decode batch.
constexpr size_t kDefaultSlabBytes = size_t{256} << 20;
// Logits rows start 1 KiB apart (the scoring kernel's stores are then whole sectors).
constexpr int64_t kPitchFloats = 256;
constexpr size_t kSlabAlignment = 1024;

// Rows [first, first + count) of a view along its dimension 0 (undefined views stay undefined).
TensorView leading_rows(const TensorView& view, int64_t first, int64_t count) {
  if (!view.defined()) return view;
  TensorView part = view;
  part.data = static_cast<unsigned char*>(view.data) +
              first * view.stride[0] * static_cast<int64_t>(dtype_size(view.dtype));
  part.shape[0] = count;
  return part;
}

// The logits slab and the top-k scratch carved out of the caller's workspace.
struct Slab {
  float* logits = nullptr;
  int64_t pitch = 0;    // floats between logits rows
  int64_t rows = 0;     // logits rows the slab holds (a multiple of the row unit)
  RunOptions topk_run;  // the caller's stream, the top-k scratch as workspace
};

// Carves the workspace for rows of `width` logits, a whole number of `row_unit` rows per batch.
Status carve_slab(const char* op, const RunOptions& options, int64_t width, int k, int64_t row_unit,
                  Slab* slab) {
  const size_t topk_bytes = topk_per_row_workspace_bound(k);
  slab->pitch = (std::max<int64_t>(width, 1) + kPitchFloats - 1) / kPitchFloats * kPitchFloats;
  const size_t unit_bytes = static_cast<size_t>(row_unit) * slab->pitch * sizeof(float);
  const size_t needed = topk_bytes + kSlabAlignment + unit_bytes;
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
  const size_t slab_bytes =
      options.workspace_bytes - (slab_start - reinterpret_cast<uintptr_t>(base));
  slab->logits = reinterpret_cast<float*>(slab_start);
  slab->rows = static_cast<int64_t>(slab_bytes / unit_bytes) * row_unit;
  slab->topk_run = options;
  slab->topk_run.workspace = base;
  slab->topk_run.workspace_bytes = topk_bytes;
  return Status::Ok();
}

TensorView slab_view(const Slab& slab, int64_t rows, int64_t width) {
  return TensorView::contiguous(slab.logits, DType::kF32, {rows, width}, Device::kCUDA)
      .with_row_stride(slab.pitch);
}

}  // namespace

size_t indexer_workspace_size(int k) {
  return topk_per_row_workspace_bound(k) + kSlabAlignment + kDefaultSlabBytes;
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       bool sorted, const RunOptions& options) {
  const int64_t rows = q.values.shape[0];
  const int64_t width = keys.values.shape[0];
  // Whole scoring groups (4 rows at H = 64, 8 at H = 32) per batch when the slab allows.
  const int64_t group_rows = 256 / q.values.shape[1];
  Slab slab;
  if (Status status = carve_slab("indexer_prefill", options, width, k, 1, &slab); !status.ok()) {
    return status;
  }
  const int64_t batch = slab.rows >= group_rows ? slab.rows / group_rows * group_rows : slab.rows;
  for (int64_t first = 0; first < rows; first += batch) {
    const int64_t count = std::min(batch, rows - first);
    const TensorView logits = slab_view(slab, count, width);
    const TensorView batch_ks = leading_rows(ks, first, count);
    const TensorView batch_ke = leading_rows(ke, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count), q.scales};
    if (Status status = mqa_logits(logits, batch_q, keys, leading_rows(weights, first, count),
                                   batch_ks, batch_ke, /*clean=*/false, options.cuda_stream);
        !status.ok()) {
      return status;
    }
    if (Status status =
            topk_per_row(leading_rows(out, first, count), logits,
                         RowRanges::prefill(batch_ks, batch_ke), k, sorted, slab.topk_run);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, bool sorted,
                      const RunOptions& options) {
  const int64_t batch_size = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  // Every visible length fits the block table, so its capacity is the logits width.
  const int64_t width = block_table.shape[1] * cache.page_size;
  Slab slab;
  if (Status status = carve_slab("indexer_decode", options, width, k, next_n, &slab);
      !status.ok()) {
    return status;
  }
  const int64_t requests_per_batch = slab.rows / next_n;
  for (int64_t first = 0; first < batch_size; first += requests_per_batch) {
    const int64_t count = std::min(requests_per_batch, batch_size - first);
    const TensorView logits = slab_view(slab, count * next_n, width);
    const TensorView batch_lens = leading_rows(context_lens, first, count);
    const QuantizedTensor batch_q{leading_rows(q.values, first, count), q.scales};
    if (Status status = paged_mqa_logits(logits, batch_q, cache,
                                         leading_rows(weights, first * next_n, count * next_n),
                                         batch_lens, leading_rows(block_table, first, count),
                                         /*clean=*/false, options.cuda_stream);
        !status.ok()) {
      return status;
    }
    if (Status status =
            topk_per_row(leading_rows(out, first * next_n, count * next_n), logits,
                         RowRanges::decode(batch_lens, next_n), k, sorted, slab.topk_run);
        !status.ok()) {
      return status;
    }
  }
  return Status::Ok();
}

}  // namespace flashindexer::cuda
