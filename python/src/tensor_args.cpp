#include "tensor_args.h"

#include <nanobind/stl/string.h>

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer::python {
namespace {

using nb::dlpack::dtype_code;

// DLPack device types (dlpack.h DLDeviceType).
constexpr int kDLCPU = 1;
constexpr int kDLCUDA = 2;
constexpr int kDLCUDAHost = 3;  // pinned host memory: the CPU reads it directly
constexpr int kDLCUDAManaged = 13;

// The CUDA backend splits rows across CTAs through a workspace of 16-byte words.
constexpr uintptr_t kWorkspaceAlignment = 16;

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

// A view's data, rank, shape and strides from a DLPack-imported array; `rank_out` gets its
// rank, and nothing else is filled beyond kMaxRank dimensions (the caller refuses those).
template <typename Array>
void fill_view(TensorView& view, const Array& array, int& rank_out) {
  rank_out = static_cast<int>(array.ndim());
  if (rank_out > kMaxRank) return;
  view.data = const_cast<void*>(static_cast<const void*>(array.data()));
  view.rank = rank_out;
  for (int d = 0; d < view.rank; ++d) {
    view.shape[d] = static_cast<int64_t>(array.shape(d));
    view.stride[d] = array.stride(d);
  }
}

// Takes a DLPack-imported array's view (fill_view) and facts, keeping the array alive in `kept`.
template <typename Array>
void adopt(Array imported, std::vector<Array>& kept, TensorView& view, nb::dlpack::dtype& dtype,
           int& device_type, int& device_id, int& rank) {
  fill_view(view, imported, rank);
  dtype = imported.dtype();
  device_type = imported.device_type();
  device_id = imported.device_id();
  kept.push_back(std::move(imported));
}

// PyTorch tensors are read from their attributes instead of through DLPack: the export
// (torch.Tensor.__dlpack__) took ~4 us per tensor on the H200 machine's host (torch 2.11), and an
// eager decode call imports 6-8 tensors (docs/benchmarks.md, "What one eager call costs"). A
// tensor outside what this reads (a dtype not in the table, one that requires grad, a device
// other than the CPU or CUDA) goes through DLPack as before, with its checks and errors. The
// references it keeps live as long as the module (never released: the interpreter may be gone
// when statics are destroyed).
class TorchReader {
 public:
  // Fills `view` (data, rank, shape, strides), `dtype` and the device when `object` is a
  // torch.Tensor this path reads, and returns true. `rank` is set whenever it returns true; past
  // kMaxRank nothing else is filled.
  bool read(nb::handle object, TensorView& view, nb::dlpack::dtype& dtype, int& device_type,
            int& device_id, int& rank) {
    if (!ready() || !PyObject_TypeCheck(object.ptr(), tensor_type_)) return false;
    if (nb::getattr(object, "requires_grad", nb::none()).ptr() != Py_False) return false;
    const bool cuda = nb::getattr(object, "is_cuda", nb::none()).ptr() == Py_True;
    if (!cuda && nb::getattr(object, "is_cpu", nb::none()).ptr() != Py_True) return false;
    const nb::object torch_dtype = object.attr("dtype");
    const Entry* entry = nullptr;
    for (const Entry& candidate : dtypes_) {
      if (candidate.torch_dtype == torch_dtype.ptr()) entry = &candidate;
    }
    if (entry == nullptr) return false;

    const nb::object shape = object.attr("shape");
    if (!PyTuple_Check(shape.ptr())) return false;
    rank = static_cast<int>(PyTuple_GET_SIZE(shape.ptr()));
    dtype = entry->dlpack;
    device_type = cuda ? kDLCUDA : kDLCPU;
    device_id = cuda ? nb::cast<int>(object.attr("get_device")()) : 0;
    if (rank > kMaxRank) return true;
    const nb::object strides = object.attr("stride")();
    if (!PyTuple_Check(strides.ptr()) || PyTuple_GET_SIZE(strides.ptr()) != rank) return false;
    view.data = reinterpret_cast<void*>(nb::cast<uintptr_t>(object.attr("data_ptr")()));
    view.rank = rank;
    for (int d = 0; d < rank; ++d) {
      view.shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), d));
      view.stride[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides.ptr(), d));
    }
    return true;
  }

 private:
  struct Entry {
    PyObject* torch_dtype;
    nb::dlpack::dtype dlpack;
  };

  // Looks PyTorch up once it has been imported (never importing it).
  bool ready() {
    if (tensor_type_ != nullptr) return true;
    PyObject* torch = PyImport_GetModule(nb::str("torch").ptr());
    if (torch == nullptr) {
      PyErr_Clear();
      return false;
    }
    const auto add = [&](const char* name, dtype_code code, int bits) {
      if (PyObject* torch_dtype = PyObject_GetAttrString(torch, name)) {
        dtypes_.push_back(
            {torch_dtype, {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1}});
      } else {
        PyErr_Clear();  // an older PyTorch without this dtype
      }
    };
    add("float32", dtype_code::Float, 32);
    add("bfloat16", dtype_code::Bfloat, 16);
    add("float8_e4m3fn", dtype_code::Float8_E4M3FN, 8);
    add("float8_e8m0fnu", dtype_code::Float8_E8M0FNU, 8);
    add("uint8", dtype_code::UInt, 8);
    add("int32", dtype_code::Int, 32);
    add("int64", dtype_code::Int, 64);
    PyObject* tensor = PyObject_GetAttrString(torch, "Tensor");
    Py_DECREF(torch);
    if (tensor == nullptr || !PyType_Check(tensor)) {
      PyErr_Clear();
      return false;
    }
    tensor_type_ = reinterpret_cast<PyTypeObject*>(tensor);
    return true;
  }

  PyTypeObject* tensor_type_ = nullptr;
  std::vector<Entry> dtypes_;
};

TorchReader& torch_reader() {
  static TorchReader* reader = new TorchReader();  // see TorchReader: never destroyed
  return *reader;
}

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

void ArgumentList::import(const std::string& where, nb::handle array, bool writable,
                          TensorView& view, nb::dlpack::dtype& dtype, int& device_type,
                          int& device_id) {
  int rank = 0;
  if (torch_reader().read(array, view, dtype, device_type, device_id, rank)) {
    held_.push_back(nb::borrow(array));
  } else if (writable) {
    nb::ndarray<> imported;
    if (!nb::try_cast(array, imported, /*convert=*/false)) {
      nb::ndarray<nb::ro> read_only;
      if (nb::try_cast(array, read_only, /*convert=*/false)) {
        raise(PyExc_ValueError, where + " is read-only, expected a writable output tensor");
      }
      raise(PyExc_TypeError, where + " is a " + nb::type_name(array.type()).c_str() +
                                 ", expected a tensor (DLPack or buffer protocol)");
    }
    adopt(std::move(imported), outputs_, view, dtype, device_type, device_id, rank);
  } else {
    nb::ndarray<nb::ro> imported;
    if (!nb::try_cast(array, imported, /*convert=*/false)) {
      raise(PyExc_TypeError, where + " is a " + nb::type_name(array.type()).c_str() +
                                 ", expected a tensor (DLPack or buffer protocol)");
    }
    adopt(std::move(imported), inputs_, view, dtype, device_type, device_id, rank);
  }
  if (rank == 0 || rank > kMaxRank) {
    raise(PyExc_ValueError, where + " has rank " + std::to_string(rank) + ", expected 1 to " +
                                std::to_string(kMaxRank) + " dimensions");
  }
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
