// SPDX-License-Identifier: Apache-2.0
// A C ABI over the CUDA ops on raw device pointers, for the A/B tools of dev/ (ctypes on torch
// tensors, dev/ab/shim.py): several builds of it load into one process side by side, which
// builds of the Python module cannot. Contiguous-inner tensors only; strides in elements.
#include <cstdint>
#include <string>

#include "flashindexer/flashindexer.h"

namespace {
thread_local std::string last_error;

// The prefill inputs of fi_mqa_logits / fi_indexer_prefill as views.
struct PrefillViews {
  flashindexer::QuantizedTensor q;
  flashindexer::QuantizedTensor keys;
  flashindexer::TensorView weights;
  flashindexer::TensorView ks;
  flashindexer::TensorView ke;

  PrefillViews(const void* q_data, int64_t rows, int heads, const void* key_data,
               const float* kscale, int64_t num_keys, const float* weight_data,
               const int32_t* ks_data, const int32_t* ke_data) {
    using namespace flashindexer;
    q = QuantizedTensor{TensorView::contiguous(const_cast<void*>(q_data), DType::kE4M3,
                                               {rows, heads, 128}, Device::kCUDA),
                        {}};
    keys = QuantizedTensor{
        TensorView::contiguous(const_cast<void*>(key_data), DType::kE4M3, {num_keys, 128},
                               Device::kCUDA),
        TensorView::contiguous(const_cast<float*>(kscale), DType::kF32, {num_keys}, Device::kCUDA)};
    weights = TensorView::contiguous(const_cast<float*>(weight_data), DType::kF32, {rows, heads},
                                     Device::kCUDA);
    ks = TensorView::contiguous(const_cast<int32_t*>(ks_data), DType::kI32, {rows}, Device::kCUDA);
    ke = TensorView::contiguous(const_cast<int32_t*>(ke_data), DType::kI32, {rows}, Device::kCUDA);
  }
};

// The options of fi_indexer_prefill / fi_indexer_decode: path 0 auto, 1 dense, 2 fused.
flashindexer::IndexerOptions path_option(int path) {
  using flashindexer::IndexerPath;
  return flashindexer::IndexerOptions{
      path == 1 ? IndexerPath::kDense : (path == 2 ? IndexerPath::kFused : IndexerPath::kAuto)};
}

flashindexer::RunOptions run_options(void* workspace, size_t workspace_bytes, void* stream) {
  flashindexer::RunOptions options;
  options.cuda_stream = stream;
  options.workspace = workspace;
  options.workspace_bytes = workspace_bytes;
  return options;
}

// The paged decode inputs of fi_paged_mqa_logits / fi_indexer_decode as views.
struct DecodeViews {
  flashindexer::QuantizedTensor q;
  flashindexer::PagedKCache cache;
  flashindexer::TensorView weights;
  flashindexer::TensorView lens;
  flashindexer::TensorView block_table;

  DecodeViews(const void* q_data, int64_t batch, int next_n, int heads, void* cache_data,
              int64_t num_pages, int page_size, int64_t page_stride, const float* weight_data,
              const int32_t* context_lens, int lens_2d, const int32_t* table, int64_t table_cols) {
    using namespace flashindexer;
    q = QuantizedTensor{TensorView::contiguous(const_cast<void*>(q_data), DType::kE4M3,
                                               {batch, next_n, heads, 128}, Device::kCUDA),
                        {}};
    cache.data = cache_data;
    cache.device = Device::kCUDA;
    cache.format = KFormat::kFP8;
    cache.num_pages = num_pages;
    cache.page_size = page_size;
    cache.head_dim = 128;
    cache.page_stride_bytes = page_stride;
    weights = TensorView::contiguous(const_cast<float*>(weight_data), DType::kF32,
                                     {batch * next_n, heads}, Device::kCUDA);
    lens = lens_2d != 0 ? TensorView::contiguous(const_cast<int32_t*>(context_lens), DType::kI32,
                                                 {batch, next_n}, Device::kCUDA)
                        : TensorView::contiguous(const_cast<int32_t*>(context_lens), DType::kI32,
                                                 {batch}, Device::kCUDA);
    block_table = TensorView::contiguous(const_cast<int32_t*>(table), DType::kI32,
                                         {batch, table_cols}, Device::kCUDA);
  }
};
}  // namespace

extern "C" {

// out [rows, >= k] i32 (row stride out_stride); logits [rows, width] f32 (dtype 0) or bf16
// (dtype 1), row stride logits_stride. Prefill form when ks != nullptr (ks, ke [rows] i32), else
// decode form: lengths [rows / next_n] i32. stream: a cudaStream_t. Returns the StatusCode.
int fi_topk_per_row(int32_t* out, int64_t out_stride, const void* logits, int dtype, int64_t rows,
                    int64_t width, int64_t logits_stride, const int32_t* ks, const int32_t* ke,
                    const int32_t* lengths, int next_n, int k, int sorted, void* workspace,
                    size_t workspace_bytes, void* stream) {
  using namespace flashindexer;
  const TensorView out_view = TensorView::contiguous(out, DType::kI32, {rows, k}, Device::kCUDA)
                                  .with_row_stride(out_stride);
  const TensorView logits_view =
      TensorView::contiguous(const_cast<void*>(logits), dtype == 1 ? DType::kBF16 : DType::kF32,
                             {rows, width}, Device::kCUDA)
          .with_row_stride(logits_stride);
  RowRanges ranges;
  if (ks != nullptr) {
    ranges = RowRanges::prefill(
        TensorView::contiguous(const_cast<int32_t*>(ks), DType::kI32, {rows}, Device::kCUDA),
        TensorView::contiguous(const_cast<int32_t*>(ke), DType::kI32, {rows}, Device::kCUDA));
  } else {
    ranges = RowRanges::decode(TensorView::contiguous(const_cast<int32_t*>(lengths), DType::kI32,
                                                      {rows / next_n}, Device::kCUDA),
                               next_n);
  }
  RunOptions options;
  options.cuda_stream = stream;
  options.workspace = workspace;
  options.workspace_bytes = workspace_bytes;
  TopKOptions topk_options;
  topk_options.sorted = sorted != 0;
  const Status status = topk_per_row(out_view, logits_view, ranges, k, topk_options, options);
  last_error = status.message();
  return static_cast<int>(status.code());
}

// logits [rows, width] f32 (row stride logits_stride); q [rows, heads, 128] e4m3 contiguous;
// keys [num_keys, 128] e4m3 contiguous, kscale [num_keys] f32; weights [rows, heads] f32;
// ks, ke [rows] i32.
int fi_mqa_logits(float* logits, int64_t logits_stride, int64_t width, const void* q, int64_t rows,
                  int heads, const void* keys, const float* kscale, int64_t num_keys,
                  const float* weights, const int32_t* ks, const int32_t* ke, int clean,
                  void* stream) {
  using namespace flashindexer;
  const PrefillViews in(q, rows, heads, keys, kscale, num_keys, weights, ks, ke);
  RunOptions options;
  options.cuda_stream = stream;
  const Status status =
      mqa_logits(TensorView::contiguous(logits, DType::kF32, {rows, width}, Device::kCUDA)
                     .with_row_stride(logits_stride),
                 in.q, in.keys, in.weights, in.ks, in.ke, LogitsOptions{clean != 0}, options);
  last_error = status.message();
  return static_cast<int>(status.code());
}

// out [rows, k] i32 contiguous; the inputs as fi_mqa_logits; path 0 auto, 1 dense, 2 fused;
// workspace: fi_indexer_workspace_size(k) bytes.
int fi_indexer_prefill(int32_t* out, int k, int sorted, int path, const void* q, int64_t rows,
                       int heads, const void* keys, const float* kscale, int64_t num_keys,
                       const float* weights, const int32_t* ks, const int32_t* ke, void* workspace,
                       size_t workspace_bytes, void* stream) {
  using namespace flashindexer;
  const PrefillViews in(q, rows, heads, keys, kscale, num_keys, weights, ks, ke);
  const Status status =
      indexer_prefill(TensorView::contiguous(out, DType::kI32, {rows, k}, Device::kCUDA), in.q,
                      in.keys, in.weights, in.ks, in.ke, k, TopKOptions{sorted != 0},
                      path_option(path), run_options(workspace, workspace_bytes, stream));
  last_error = status.message();
  return static_cast<int>(status.code());
}

// logits [batch * next_n, width] f32; q [batch, next_n, heads, 128] e4m3 contiguous; an FP8 page
// cache of num_pages pages (page_size keys, page_stride bytes apart); weights [batch * next_n,
// heads] f32; context_lens [batch] (lens_2d 0) or [batch, next_n] i32; block_table
// [batch, table_cols] i32.
int fi_paged_mqa_logits(float* logits, int64_t logits_stride, int64_t width, const void* q,
                        int64_t batch, int next_n, int heads, void* cache, int64_t num_pages,
                        int page_size, int64_t page_stride, const float* weights,
                        const int32_t* context_lens, int lens_2d, const int32_t* block_table,
                        int64_t table_cols, int clean, void* stream) {
  using namespace flashindexer;
  const DecodeViews in(q, batch, next_n, heads, cache, num_pages, page_size, page_stride, weights,
                       context_lens, lens_2d, block_table, table_cols);
  RunOptions options;
  options.cuda_stream = stream;
  const Status status = paged_mqa_logits(
      TensorView::contiguous(logits, DType::kF32, {batch * next_n, width}, Device::kCUDA)
          .with_row_stride(logits_stride),
      in.q, in.cache, in.weights, in.lens, in.block_table, LogitsOptions{clean != 0}, options);
  last_error = status.message();
  return static_cast<int>(status.code());
}

// out [batch * next_n, k] i32 contiguous; the inputs as fi_paged_mqa_logits; path 0 auto,
// 1 dense, 2 fused; workspace: fi_indexer_workspace_size(k) bytes.
int fi_indexer_decode(int32_t* out, int k, int sorted, int path, const void* q, int64_t batch,
                      int next_n, int heads, void* cache, int64_t num_pages, int page_size,
                      int64_t page_stride, const float* weights, const int32_t* context_lens,
                      int lens_2d, const int32_t* block_table, int64_t table_cols, void* workspace,
                      size_t workspace_bytes, void* stream) {
  using namespace flashindexer;
  const DecodeViews in(q, batch, next_n, heads, cache, num_pages, page_size, page_stride, weights,
                       context_lens, lens_2d, block_table, table_cols);
  const Status status = indexer_decode(
      TensorView::contiguous(out, DType::kI32, {batch * next_n, k}, Device::kCUDA), in.q, in.cache,
      in.weights, in.lens, in.block_table, k, TopKOptions{sorted != 0}, path_option(path),
      run_options(workspace, workspace_bytes, stream));
  last_error = status.message();
  return static_cast<int>(status.code());
}

size_t fi_indexer_workspace_size(int k) { return flashindexer::indexer_cuda_workspace_size(k); }

size_t fi_topk_workspace_size(int64_t rows, int64_t width, int k) {
  return flashindexer::topk_per_row_cuda_workspace_size(rows, width, k);
}

const char* fi_last_error() { return last_error.c_str(); }

}  // extern "C"
