// SPDX-License-Identifier: Apache-2.0
#include "dlpack_dtypes.h"

#include <string>

namespace flashindexer::python {

using nb::dlpack::dtype_code;

std::string dlpack_dtype_name(nb::dlpack::dtype dtype) {
  const std::string bits = std::to_string(dtype.bits);
  std::string name;
  switch (static_cast<dtype_code>(dtype.code)) {
    case dtype_code::Int:
      name = "int" + bits;
      break;
    case dtype_code::UInt:
      name = "uint" + bits;
      break;
    case dtype_code::Float:
      name = "float" + bits;
      break;
    case dtype_code::Bfloat:
      name = "bfloat" + bits;
      break;
    case dtype_code::Complex:
      name = "complex" + bits;
      break;
    case dtype_code::Bool:
      name = "bool";
      break;
    case dtype_code::Float8_E4M3FN:
      name = "float8_e4m3fn";
      break;
    case dtype_code::Float8_E5M2:
      name = "float8_e5m2";
      break;
    case dtype_code::Float8_E8M0FNU:
      name = "float8_e8m0fnu";
      break;
    case dtype_code::Float4_E2M1FN:
      name = "float4_e2m1fn";
      break;
    default:
      name = "DLPack type code " + std::to_string(dtype.code) + " with " + bits + " bits";
  }
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

// What a DLPack dtype is to FlashIndexer; `bytes_as` is what a uint8 tensor stands for.
bool dtype_from_dlpack(nb::dlpack::dtype dtype, DType bytes_as, DType* out) {
  if (dtype.lanes != 1) return false;
  switch (static_cast<dtype_code>(dtype.code)) {
    case dtype_code::Float:
      *out = DType::kF32;
      return dtype.bits == 32;
    case dtype_code::Bfloat:
      *out = DType::kBF16;
      return dtype.bits == 16;
    case dtype_code::UInt:
      *out = bytes_as;
      return dtype.bits == 8;
    case dtype_code::Int:
      *out = dtype.bits == 64 ? DType::kI64 : DType::kI32;
      return dtype.bits == 32 || dtype.bits == 64;
    case dtype_code::Float8_E4M3FN:
      *out = DType::kE4M3;
      return dtype.bits == 8;
    case dtype_code::Float8_E8M0FNU:
      *out = DType::kUE8M0;
      return dtype.bits == 8;
    default:
      return false;
  }
}

// The dtype named by a tag of a (array, "tag") argument.
bool dtype_from_tag(const std::string& tag, DType* out) {
  static constexpr DType kAll[] = {DType::kF32,   DType::kBF16, DType::kE4M3, DType::kE2M1x2,
                                   DType::kUE8M0, DType::kI32,  DType::kI64,  DType::kU8};
  for (DType dtype : kAll) {
    if (tag == dtype_name(dtype)) {
      *out = dtype;
      return true;
    }
  }
  return false;
}

std::string device_string(Device device, int device_id) {
  return device == Device::kCUDA ? "cuda:" + std::to_string(device_id) : "cpu";
}

}  // namespace flashindexer::python
