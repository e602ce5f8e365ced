// SPDX-License-Identifier: Apache-2.0
#include "tensor_args.h"

#include <nanobind/stl/string.h>

#include <string>

#include "dlpack_dtypes.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer::python {
namespace {

// The CUDA backend splits rows across CTAs through a workspace of 16-byte words.
constexpr uintptr_t kWorkspaceAlignment = 16;

}  // namespace

void raise(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nb::python_error();
}

void raise_if_error(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kInvalidArgument:
      // ArgCheck words every dtype failure "<argument> has dtype <received>, expected ...".
      raise(status.message().find(" has dtype ") != std::string::npos ? PyExc_TypeError
                                                                      : PyExc_ValueError,
            status.message());
    case StatusCode::kUnsupported:
      raise(PyExc_NotImplementedError, status.message());
    case StatusCode::kWorkspaceTooSmall:
      raise(PyExc_ValueError, status.message());
    case StatusCode::kDeviceError:
      raise(PyExc_RuntimeError, status.message());
  }
  raise(PyExc_RuntimeError, status.message());
}

TensorView ArgumentList::input(const char* name, nb::handle object, DType bytes_as) {
  return view(name, object, bytes_as, /*writable=*/false);
}

TensorView ArgumentList::output(const char* name, nb::handle object, DType bytes_as) {
  return view(name, object, bytes_as, /*writable=*/true);
}

TensorView ArgumentList::view(const char* name, nb::handle object, DType bytes_as, bool writable) {
  TensorView view;
  if (object.is_none()) return view;
  const std::string where = std::string(op_) + ": " + name;

  nb::handle array = object;
  bool tagged = false;
  DType tagged_dtype = DType::kU8;
  if (nb::isinstance<nb::tuple>(object)) {
    nb::tuple pair = nb::borrow<nb::tuple>(object);
    if (pair.size() != 2 || !nb::isinstance<nb::str>(pair[1])) {
      raise(PyExc_TypeError, where + " is a tuple; expected a tensor or (tensor, \"format\")");
    }
    const std::string tag = nb::cast<std::string>(pair[1]);
    if (!dtype_from_tag(tag, &tagged_dtype)) {
      raise(PyExc_ValueError, where + " names format \"" + tag +
                                  "\", expected one of f32, bf16, e4m3, e2m1x2, ue8m0, i32, "
                                  "i64, u8");
    }
    array = pair[0];
    tagged = true;
  }

  nb::dlpack::dtype dtype;
  int device_type = 0;
  int device_id = 0;
  import(where, array, writable, view, dtype, device_type, device_id);
  if (tagged) {
    if (dtype.bits != 8 * dtype_size(tagged_dtype) || dtype.lanes != 1) {
      raise(PyExc_TypeError, where + " has dtype " + dlpack_dtype_name(dtype) +
                                 ", which cannot hold format " + dtype_name(tagged_dtype));
    }
    view.dtype = tagged_dtype;
  } else if (!dtype_from_dlpack(dtype, bytes_as, &view.dtype)) {
    raise(PyExc_TypeError,
          where + " has dtype " + dlpack_dtype_name(dtype) +
              ", which FlashIndexer does not take (float32, bfloat16, float8_e4m3fn, "
              "float8_e8m0fnu, uint8, int32 or int64, as the argument requires)");
  }

  if (device_type == kDLCPU || device_type == kDLCUDAHost) {
    view.device = Device::kCPU;
  } else if (device_type == kDLCUDA || device_type == kDLCUDAManaged) {
    view.device = Device::kCUDA;
  } else {
    raise(PyExc_ValueError, where + " lives on DLPack device type " + std::to_string(device_type) +
                                ", expected CPU or CUDA memory");
  }
  note_device(name, view.device, device_id);
  return view;
}

void ArgumentList::note_device(const char* name, Device device, int device_id) {
  if (device != Device::kCUDA) return;
  if (cuda_device_ < 0) {
    cuda_device_ = device_id;
    cuda_device_argument_ = name;
  } else if (device_id != cuda_device_) {
    raise(PyExc_ValueError, std::string(op_) + ": " + name + " is on " +
                                device_string(device, device_id) + ", expected " +
                                device_string(device, cuda_device_) + " like " +
                                cuda_device_argument_);
  }
}

PagedKCache ArgumentList::cache(const char* name, nb::handle object, bool writable) {
  const std::string where = std::string(op_) + ": " + name;
  for (const char* attribute : {"data", "page_size", "head_dim", "format"}) {
    if (!nb::hasattr(object, attribute)) {
      raise(PyExc_TypeError,
            where + " has no attribute '" + attribute + "', expected a flashindexer.PagedKCache");
    }
  }
  PagedKCache cache;
  cache.page_size = nb::cast<int>(object.attr("page_size"));
  cache.head_dim = nb::cast<int>(object.attr("head_dim"));
  const std::string format = nb::cast<std::string>(object.attr("format"));
  if (format == "fp8") {
    cache.format = KFormat::kFP8;
  } else if (format == "mxfp4") {
    cache.format = KFormat::kMXFP4;
  } else {
    raise(PyExc_ValueError, where + ".format is \"" + format + "\", expected \"fp8\" or \"mxfp4\"");
  }

  const std::string data_name = std::string(name) + ".data";
  const TensorView pages = view(data_name.c_str(), object.attr("data"), DType::kU8, writable);
  if (pages.dtype != DType::kU8) {
    raise(PyExc_TypeError,
          where + ".data has dtype " + dtype_name(pages.dtype) + ", expected uint8 page bytes");
  }
  const bool rows_of_keys = pages.rank == 3;  // [num_pages, page_size, bytes per key]
  if (pages.rank != 2 && !rows_of_keys) {
    raise(PyExc_ValueError, where + ".data has rank " + std::to_string(pages.rank) +
                                ", expected [num_pages, page bytes] or [num_pages, page_size, "
                                "bytes per key]");
  }
  const bool inner_contiguous = rows_of_keys
                                    ? (pages.stride[2] == 1 || pages.shape[2] <= 1) &&
                                          (pages.stride[1] == pages.shape[2] || pages.shape[1] <= 1)
                                    : pages.stride[1] == 1 || pages.shape[1] <= 1;
  if (!inner_contiguous) {
    raise(PyExc_ValueError, where +
                                ".data must hold each page contiguously (only the page "
                                "dimension may be strided)");
  }
  cache.data = pages.data;
  cache.device = pages.device;
  cache.num_pages = pages.shape[0];
  const int64_t bytes_held = rows_of_keys ? pages.shape[1] * pages.shape[2] : pages.shape[1];
  const bool layout_known = cache.page_size > 0 && (cache.head_dim == 64 || cache.head_dim == 128);
  if (!layout_known) return cache;  // the op names the bad page_size / head_dim
  const int64_t page_bytes = PagedKCache::page_bytes(cache.format, cache.page_size, cache.head_dim);
  if (bytes_held < page_bytes) {
    raise(PyExc_ValueError,
          where + ".data holds " + std::to_string(bytes_held) +
              " bytes per page, expected at least " + std::to_string(page_bytes) + " (" +
              std::to_string(cache.page_size) + " keys of " +
              std::to_string(PagedKCache::bytes_per_key(cache.format, cache.head_dim)) + " bytes)");
  }
  // With one page the page stride is never used to step; report the page's own size.
  cache.page_stride_bytes = cache.num_pages > 1 ? pages.stride[0] : (page_bytes + 3) / 4 * 4;
  return cache;
}

RunOptions ArgumentList::options(uintptr_t cuda_stream, nb::handle workspace, int cpu_threads) {
  RunOptions options;
  options.cuda_stream = reinterpret_cast<void*>(cuda_stream);
  options.cpu_threads = cpu_threads;
  if (workspace.is_none()) return options;
  const std::string where = std::string(op_) + ": workspace";
  TensorView scratch;
  nb::dlpack::dtype dtype;
  int device_type = 0;
  int device_id = 0;
  import(where, workspace, /*writable=*/true, scratch, dtype, device_type, device_id);
  const int64_t elements = scratch.numel();
  // An empty workspace is refused by the op that needs room, whatever its strides.
  if (elements > 0 && !scratch.is_contiguous()) {
    raise(PyExc_ValueError, where + " must be contiguous");
  }
  const bool on_cuda = device_type == kDLCUDA || device_type == kDLCUDAManaged;
  const bool op_on_cuda = cuda_device_ >= 0;
  if (on_cuda != op_on_cuda || (on_cuda && device_id != cuda_device_)) {
    raise(PyExc_ValueError,
          where + " is on " + device_string(on_cuda ? Device::kCUDA : Device::kCPU, device_id) +
              ", expected " +
              (op_on_cuda
                   ? device_string(Device::kCUDA, cuda_device_) + " like " + cuda_device_argument_
                   : std::string("cpu like the other tensors")));
  }
  if (reinterpret_cast<uintptr_t>(scratch.data) % kWorkspaceAlignment != 0) {
    raise(PyExc_ValueError, where + " must be 16-byte aligned");
  }
  options.workspace = scratch.data;
  options.workspace_bytes = static_cast<size_t>(elements) * ((dtype.bits * dtype.lanes + 7) / 8);
  return options;
}

ArgumentList::DeviceScope::DeviceScope(int device) {
#ifdef FLASHINDEXER_WITH_CUDA
  int current = -1;
  if (device < 0 || cudaGetDevice(&current) != cudaSuccess) return;
  if (current != device && cudaSetDevice(device) == cudaSuccess) previous_ = current;
#else
  (void)device;
#endif
}

ArgumentList::DeviceScope::~DeviceScope() {
#ifdef FLASHINDEXER_WITH_CUDA
  if (previous_ >= 0) cudaSetDevice(previous_);
#endif
}

}  // namespace flashindexer::python
