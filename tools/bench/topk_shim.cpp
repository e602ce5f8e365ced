// A C ABI over flashindexer::topk_per_row on device pointers, for tools/bench/bench_topk.py
// (ctypes) until the Python binding exists. Contiguous-inner tensors only; strides in elements.
#include <cstdint>
#include <string>

#include "flashindexer/flashindexer.h"

namespace {
thread_local std::string last_error;
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
  const TensorView out_view =
      TensorView::contiguous(out, DType::kI32, {rows, k}, Device::kCUDA).with_row_stride(out_stride);
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

size_t fi_topk_workspace_size(int64_t rows, int64_t width, int k) {
  return flashindexer::topk_per_row_cuda_workspace_size(rows, width, k);
}

const char* fi_last_error() { return last_error.c_str(); }

}  // extern "C"
