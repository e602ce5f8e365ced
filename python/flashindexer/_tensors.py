# SPDX-License-Identifier: Apache-2.0
"""Framework plumbing: which framework a tensor comes from, how to allocate beside it, how to hand
it to ``flashindexer._C``, and which CUDA stream to run on.

Nothing here imports PyTorch or CuPy: a tensor of theirs can only exist once they are imported,
so they are looked up in ``sys.modules``. Nothing here touches CUDA unless a tensor is on it.
"""

import sys

import numpy as np

# Dtypes some frameworks cannot export through DLPack: handed to _C as a raw view plus the
# format's name (see python/src/tensor_args.h). Name -> (format, bytes per element).
_RAW_FORMATS = {
    "float8_e4m3fn": ("e4m3", 1),
    "float8_e8m0fnu": ("ue8m0", 1),
    "float4_e2m1fn_x2": ("e2m1x2", 1),
    "bfloat16": ("bf16", 2),
}

# DLPack device types of CUDA memory (kDLCUDA, kDLCUDAManaged).
_DLPACK_CUDA = (2, 13)


def framework(x):
    """'torch', 'numpy', 'cupy', 'jax' or 'other'."""
    module = type(x).__module__
    for name in ("torch", "numpy", "cupy", "jax"):
        if module == name or module.startswith(name + ".") or module.startswith(name + "lib"):
            return name
    return "other"


def is_cuda(x):
    """True when the tensor lives in CUDA memory."""
    kind = framework(x)
    if kind == "torch":
        return x.device.type == "cuda"
    if kind == "numpy":
        return False
    if kind == "cupy":
        return True
    device = getattr(x, "__dlpack_device__", None)
    return device is not None and device()[0] in _DLPACK_CUDA


def _dtype_name(x):
    return str(getattr(x, "dtype", "")).rpartition(".")[2]


def raw(x):
    """The argument as _C takes it: the tensor itself, or (raw view, format) for a dtype that
    does not travel through DLPack everywhere (FP8 / FP4 of PyTorch, ml_dtypes arrays)."""
    if x is None:
        return None
    entry = _RAW_FORMATS.get(_dtype_name(x))
    if entry is None:
        return x
    tag, size = entry
    kind = framework(x)
    if kind == "torch":
        # _C reads PyTorch's bfloat16 and 8-bit float tensors by their attributes (a tensor that
        # requires grad goes through DLPack instead, which exports bfloat16 only).
        if tag == "bf16" or (tag in ("e4m3", "ue8m0") and not x.requires_grad):
            return x
        return (x.view(sys.modules["torch"].uint8), tag)
    if kind == "numpy":
        return (x.view(np.uint8 if size == 1 else np.uint16), tag)
    return x


def _torch_dtype(torch, name):
    if name == "e4m3":
        return getattr(torch, "float8_e4m3fn", torch.uint8)
    return {"f32": torch.float32, "i32": torch.int32, "i64": torch.int64, "u8": torch.uint8}[name]


def _numpy_dtype(name):
    if name == "e4m3":
        try:
            import ml_dtypes

            return ml_dtypes.float8_e4m3fn
        except ImportError:
            return np.uint8
    return {"f32": np.float32, "i32": np.int32, "i64": np.int64, "u8": np.uint8}[name]


def empty(like, shape, dtype):
    """An uninitialised tensor of `shape` beside `like`: same framework and device.

    dtype: 'f32', 'i32', 'i64', 'u8' or 'e4m3' (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn,
    else uint8). Frameworks other than PyTorch, CuPy and NumPy get a NumPy array for CPU inputs;
    for their GPU inputs the caller must pass the output (out=).
    """
    shape = tuple(int(n) for n in shape)
    kind = framework(like)
    if kind == "torch":
        torch = sys.modules["torch"]
        return torch.empty(shape, dtype=_torch_dtype(torch, dtype), device=like.device)
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.empty(shape, dtype=_numpy_dtype("u8" if dtype == "e4m3" else dtype))
    if is_cuda(like):
        raise TypeError(
            f"cannot allocate an output beside a {type(like).__name__} in CUDA memory: pass out="
        )
    return np.empty(shape, dtype=_numpy_dtype(dtype))


def from_numpy(like, array):
    """A NumPy array moved to the framework and device of `like`."""
    kind = framework(like)
    if kind == "torch":
        return sys.modules["torch"].from_numpy(np.ascontiguousarray(array)).to(like.device)
    if kind == "cupy":
        cupy = sys.modules["cupy"]
        with like.device:
            return cupy.asarray(array)
    return array


def device_index(x):
    """The CUDA device ordinal of a CUDA tensor."""
    kind = framework(x)
    if kind == "torch":
        return x.device.index if x.device.index is not None else 0
    if kind == "cupy":
        return x.device.id
    return int(x.__dlpack_device__()[1])


def stream_handle(stream, tensors):
    """The cudaStream_t (as an integer) an op runs on.

    An explicit `stream` may be an integer handle, a torch.cuda.Stream, a CuPy stream or any
    object with ``__cuda_stream__``. Without one: the current PyTorch stream of the first CUDA
    PyTorch tensor, the current CuPy stream for CuPy arrays, else 0 (the legacy default stream).
    CPU tensors never touch CUDA.
    """
    if stream is not None:
        if isinstance(stream, int):
            return stream
        if hasattr(stream, "__cuda_stream__"):
            return int(stream.__cuda_stream__()[1])
        if hasattr(stream, "cuda_stream"):
            return int(stream.cuda_stream)
        if hasattr(stream, "ptr"):
            return int(stream.ptr)
        raise TypeError(f"stream is a {type(stream).__name__}, expected an integer cudaStream_t, "
                        "a torch.cuda.Stream or a CuPy stream")
    for x in tensors:
        if x is None or not is_cuda(x):
            continue
        kind = framework(x)
        if kind == "torch":
            torch = sys.modules["torch"]
            # The raw handle without building a torch.cuda.Stream (~6 us per call on the H200
            # machine's host), where this PyTorch has the accessor.
            current_raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
            if current_raw is not None:
                return int(current_raw(x.get_device()))
            return int(torch.cuda.current_stream(x.device).cuda_stream)
        if kind == "cupy":
            return int(sys.modules["cupy"].cuda.get_current_stream().ptr)
        return 0
    return 0


def shape(x, name="tensor"):
    """The shape of a tensor argument as a tuple of ints."""
    try:
        return tuple(int(n) for n in x.shape)
    except AttributeError:
        raise TypeError(f"{name} is a {type(x).__name__}, expected a tensor") from None
