// SPDX-License-Identifier: Apache-2.0
// The scoring calls' tensor maps (tensor_maps.h), through cuTensorMapEncodeTiled.
#include <cuda.h>
#include <cuda_runtime.h>

#include "core/checks.h"
#include "cuda/sm90_scoring/config.h"
#include "cuda/sm90_scoring/tensor_maps.h"

namespace flashindexer::cuda::scoring {
namespace {

// cuTensorMapEncodeTiled, from the driver through the runtime (no link against libcuda).
using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                 const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                 const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                 CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiled encode_tiled() {
  static const EncodeTiled function = [] {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      entry = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(entry);
  }();
  return function;
}

// A tiled map over `rank` dimensions (innermost first; strides in bytes for dims 1..rank-1).
struct MapSpec {
  const char* what;
  CUtensorMapDataType type;
  int rank;
  const void* base;
  cuuint64_t dims[4];
  cuuint64_t strides[3];
  cuuint32_t box[4];
  bool swizzle128;
};

Status encode(CUtensorMap& map, const MapSpec& spec, const char* op) {
  const EncodeTiled encode_fn = encode_tiled();
  if (encode_fn == nullptr) {
    return Status::DeviceError(concat(op, ": the CUDA driver has no cuTensorMapEncodeTiled"));
  }
  const cuuint32_t element_strides[4] = {1, 1, 1, 1};
  const CUresult result =
      encode_fn(&map, spec.type, spec.rank, const_cast<void*>(spec.base), spec.dims, spec.strides,
                spec.box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                spec.swizzle128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    return Status::DeviceError(
        concat(op, ": cuTensorMapEncodeTiled failed for ", spec.what, " (CUresult ", result, ")"));
  }
  return Status::Ok();
}

// Keys of either format: FP8 rows of 128 e4m3 bytes (128-byte swizzle, the wgmma's layout) and a
// fp32 scale a key; MXFP4 rows of 64 packed bytes copied as they are into a raw slot (the
// converting warps write the swizzled e4m3 tile) and a scale word a key.
struct KeyRows {
  cuuint64_t bytes;
  bool swizzle128;
  CUtensorMapDataType scale_type;
};

KeyRows key_rows(bool mxfp4) {
  return mxfp4 ? KeyRows{kHeadDim / 2, false, CU_TENSOR_MAP_DATA_TYPE_UINT32}
               : KeyRows{kHeadDim, true, CU_TENSOR_MAP_DATA_TYPE_FLOAT32};
}

}  // namespace

Status encode_weights(ScoreMaps& maps, const char* op, const TensorView& weights, int64_t tokens,
                      int heads, int rows_per_group) {
  const auto h = static_cast<cuuint32_t>(heads);
  const MapSpec w_spec{"weights",
                       CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
                       2,
                       weights.data,
                       {h, static_cast<cuuint64_t>(tokens), 1},
                       {static_cast<cuuint64_t>(weights.stride[0] * 4), 0},
                       {h, static_cast<cuuint32_t>(rows_per_group), 1},
                       false};
  return encode(maps.w, w_spec, op);
}

Status encode_queries(ScoreMaps& maps, const char* op, const TensorView& q, int64_t tokens,
                      int64_t token_stride, int heads, const TensorView& weights,
                      int rows_per_group, bool lane_owned_rows) {
  const auto head_stride = static_cast<cuuint64_t>(q.stride[q.rank - 2]);
  const auto row_stride = static_cast<cuuint64_t>(token_stride);
  const auto rows = static_cast<cuuint64_t>(tokens);
  const auto h = static_cast<cuuint32_t>(heads);
  const MapSpec q_spec = lane_owned_rows
                             ? MapSpec{"q",
                                       CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                       4,
                                       q.data,
                                       {kHeadDim, 2, rows, h / 2},
                                       {head_stride, row_stride, 2 * head_stride},
                                       {kHeadDim, 2, 4, h / 2},
                                       true}
                             : MapSpec{"q",
                                       CU_TENSOR_MAP_DATA_TYPE_UINT8,
                                       3,
                                       q.data,
                                       {kHeadDim, h, rows},
                                       {head_stride, row_stride},
                                       {kHeadDim, h, static_cast<cuuint32_t>(rows_per_group)},
                                       true};
  if (Status status = encode(maps.q, q_spec, op); !status.ok()) return status;
  return encode_weights(maps, op, weights, tokens, heads, rows_per_group);
}

Status encode_mxfp4_queries(ScoreMaps& maps, const char* op, const TensorView& q, int64_t tokens,
                            int64_t token_stride, int heads, const TensorView& weights,
                            int rows_per_group, int box_rows) {
  const auto h = static_cast<cuuint32_t>(heads);
  const auto rows = static_cast<cuuint64_t>(tokens);
  const MapSpec q_spec{
      "q.values",
      CU_TENSOR_MAP_DATA_TYPE_UINT8,
      3,
      q.data,
      {kHeadDim / 2, h, rows},
      {static_cast<cuuint64_t>(q.stride[q.rank - 2]), static_cast<cuuint64_t>(token_stride)},
      {kHeadDim / 2, h, static_cast<cuuint32_t>(box_rows)},
      false};
  if (Status status = encode(maps.q, q_spec, op); !status.ok()) return status;
  return encode_weights(maps, op, weights, tokens, heads, rows_per_group);
}

Status encode_packed_keys(ScoreMaps& maps, const char* op, const QuantizedTensor& keys, int rows,
                          int scale_rows) {
  const KeyRows row = key_rows(keys.values.dtype == DType::kE2M1x2);
  const auto num_keys = static_cast<cuuint64_t>(keys.values.shape[0]);
  const MapSpec key_spec{"keys.values",
                         CU_TENSOR_MAP_DATA_TYPE_UINT8,
                         2,
                         keys.values.data,
                         {row.bytes, num_keys, 1},
                         {static_cast<cuuint64_t>(keys.values.stride[0]), 0},
                         {static_cast<cuuint32_t>(row.bytes), static_cast<cuuint32_t>(rows), 1},
                         row.swizzle128};
  if (Status status = encode(maps.keys, key_spec, op); !status.ok()) return status;
  const MapSpec scale_spec{"keys.scales",
                           row.scale_type,
                           1,
                           keys.scales.data,
                           {num_keys, 1, 1},
                           {0, 0},
                           {static_cast<cuuint32_t>(scale_rows), 1, 1},
                           false};
  return encode(maps.scales, scale_spec, op);
}

Status encode_paged_keys(ScoreMaps& maps, const char* op, const PagedKCache& cache, int rows) {
  const KeyRows row = key_rows(cache.format == KFormat::kMXFP4);
  const auto page_stride = static_cast<cuuint64_t>(cache.page_stride_bytes);
  const auto pages = static_cast<cuuint64_t>(cache.num_pages);
  const auto page_size = static_cast<cuuint64_t>(cache.page_size);
  const MapSpec key_spec{"cache values",
                         CU_TENSOR_MAP_DATA_TYPE_UINT8,
                         3,
                         cache.data,
                         {row.bytes, page_size, pages},
                         {row.bytes, page_stride},
                         {static_cast<cuuint32_t>(row.bytes), static_cast<cuuint32_t>(rows), 1},
                         row.swizzle128};
  if (Status status = encode(maps.keys, key_spec, op); !status.ok()) return status;
  const MapSpec scale_spec{"cache scales",
                           row.scale_type,
                           2,
                           static_cast<const uint8_t*>(cache.data) + page_size * row.bytes,
                           {page_size, pages, 1},
                           {page_stride, 0},
                           {static_cast<cuuint32_t>(rows), 1, 1},
                           false};
  return encode(maps.scales, scale_spec, op);
}

}  // namespace flashindexer::cuda::scoring
