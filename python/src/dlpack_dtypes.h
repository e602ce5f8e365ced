// SPDX-License-Identifier: Apache-2.0
// What a DLPack dtype and device are to FlashIndexer, and the names errors give them: the
// mapping ArgumentList (tensor_args.h) applies to every imported tensor.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include "flashindexer/flashindexer.h"

namespace flashindexer::python {

namespace nb = nanobind;

// DLPack device types (dlpack.h DLDeviceType).
inline constexpr int kDLCPU = 1;
inline constexpr int kDLCUDA = 2;
inline constexpr int kDLCUDAHost = 3;  // pinned host memory: the CPU reads it directly
inline constexpr int kDLCUDAManaged = 13;

// A DLPack dtype as an error message names it (float32, uint8, ...).
std::string dlpack_dtype_name(nb::dlpack::dtype dtype);

// What a DLPack dtype is to FlashIndexer; `bytes_as` is what a uint8 tensor stands for.
bool dtype_from_dlpack(nb::dlpack::dtype dtype, DType bytes_as, DType* out);

// The dtype named by a tag of a (array, "tag") argument.
bool dtype_from_tag(const std::string& tag, DType* out);

// "cpu" or "cuda:<id>".
std::string device_string(Device device, int device_id);

}  // namespace flashindexer::python
