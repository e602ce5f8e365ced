// Element access for the CPU backend: strided addressing and format decoding by table.
#pragma once

#include <array>
#include <cstring>
#include <cstdint>

#include "flashindexer/formats.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cpu {

// Address of element (i0, i1, ...) of a view.
template <typename T, typename... Index>
T* element(const TensorView& view, Index... index) {
  // An empty view may have no memory (null data); offsetting null is undefined even unread.
  if (view.data == nullptr) return nullptr;
  const int64_t indices[] = {static_cast<int64_t>(index)...};
  int64_t offset = 0;
  for (size_t d = 0; d < sizeof...(Index); ++d) offset += indices[d] * view.stride[d];
  return static_cast<T*>(view.data) + offset;
}

inline int32_t read_index(const TensorView& view, int64_t i) {
  return view.dtype == DType::kI64 ? static_cast<int32_t>(*element<int64_t>(view, i))
                                   : *element<int32_t>(view, i);
}


// Reads n f32 or bf16 elements starting at element offset `offset` into floats.
void load_floats(float* out, const TensorView& view, int64_t offset, int64_t n);

// e4m3 code -> float, and E2M1 code -> float, by table (exact).
const std::array<float, 256>& e4m3_table();
const std::array<float, 16>& e2m1_table();

// Dequantizes one row of D values (FP8: unscaled e4m3 values; MXFP4: values * block scales).
void decode_fp8_row(float* out, const uint8_t* values, int head_dim);
void decode_mxfp4_row(float* out, const uint8_t* values, const uint8_t* scales, int head_dim);
// The same into a column: out[d * out_stride].
void decode_fp8_column(float* out, int64_t out_stride, const uint8_t* values, int head_dim);
void decode_mxfp4_column(float* out, int64_t out_stride, const uint8_t* values,
                         const uint8_t* scales, int head_dim);

}  // namespace flashindexer::cpu

namespace flashindexer::cpu {

// Number of rows of a view (product of all but the last dimension) and the element offset of
// flat row `row` (row-major over the outer dimensions, honouring their strides).
int64_t outer_rows(const TensorView& view);
int64_t row_offset(const TensorView& view, int64_t row);

}  // namespace flashindexer::cpu
