// SPDX-License-Identifier: Apache-2.0
// ArgumentList::import: a PyTorch tensor read by its attributes, anything else through DLPack or
// the buffer protocol, into a view kept alive for the call.
#include <string>
#include <utility>
#include <vector>

#include "dlpack_dtypes.h"
#include "tensor_args.h"

namespace flashindexer::python {
namespace {

using nb::dlpack::dtype_code;

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
// eager decode call imports 6-8 tensors (docs/history/benchmarks-overhead-multigpu-dequantize.md).
// A tensor outside what this reads (a dtype not in the table, one that requires grad, a device
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
  // An empty array's strides mean nothing (NumPy hands zeros through DLPack): take the
  // contiguous ones, so that an empty input or output passes the ops' layout checks.
  if (view.numel() == 0) {
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      view.stride[d] = stride;
      stride *= view.shape[d] > 0 ? view.shape[d] : 1;
    }
  }
}

}  // namespace flashindexer::python
