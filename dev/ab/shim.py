# SPDX-License-Identifier: Apache-2.0
"""The ctypes side of the A/B tools: bench_shim.cpp's C ABI over torch CUDA tensors.

A build of the shim (`-DFLASHINDEXER_DEV=ON`, target flashindexer_bench_shim) links one build
of the library, so that several builds load side by side into one process and run on the same
tensors in alternation. The product benchmark (`python -m bench`) never uses it.
"""
import ctypes

import torch

K = 2048
WIDTH = 131072

# The decode shapes the A/B tools and probes name (H, batch, context, next_n, ragged lengths
# 0.7-1.3 x context).
DECODE = [
    ("H64 b1 131072", 64, 1, 131072, 1, False),
    ("H64 b16 65536", 64, 16, 65536, 1, False),
    ("H64 b64 32768", 64, 64, 32768, 1, False),
    ("H64 b256 32768", 64, 256, 32768, 1, False),
    ("H64 b64 131072", 64, 64, 131072, 1, False),
    ("H64 b128 131072", 64, 128, 131072, 1, False),
    ("H32 b1 131072", 32, 1, 131072, 1, False),
    ("H32 b64 32768", 32, 64, 32768, 1, False),
    ("H32 b128 131072", 32, 128, 131072, 1, False),
    ("D2 H64 b64 ~65536 n2", 64, 64, 65536, 2, True),
    ("D4 H64 b256 ~65536 n2", 64, 256, 65536, 2, True),
    ("D7 H64 b64 ~32768 n3", 64, 64, 32768, 3, True),
    ("D7 H64 b64 ~32768 n4", 64, 64, 32768, 4, True),
    ("D6 H32 b64 ~65536 n4", 32, 64, 65536, 4, True),
]


def load_shim(path):
    """The shim at `path` with the argument types of every entry it exports."""
    lib = ctypes.CDLL(path)
    p, i64, i32, size = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_size_t
    lib.fi_last_error.restype = ctypes.c_char_p
    lib.fi_topk_per_row.restype = i32
    lib.fi_topk_per_row.argtypes = [p, i64, p, i32, i64, i64, i64, p, p, p, i32, i32, i32, p,
                                    size, p]
    lib.fi_topk_workspace_size.restype = size
    lib.fi_topk_workspace_size.argtypes = [i64, i64, i32]
    lib.fi_mqa_logits.restype = i32
    lib.fi_mqa_logits.argtypes = [p, i64, i64, p, i64, i32, p, p, i64, p, p, p, i32, p]
    lib.fi_paged_mqa_logits.restype = i32
    lib.fi_paged_mqa_logits.argtypes = [p, i64, i64, p, i64, i32, i32, p, i64, i32, i64, p, p,
                                        i32, p, i64, i32, p]
    lib.fi_indexer_decode.restype = i32
    lib.fi_indexer_decode.argtypes = [p, i32, i32, i32, p, i64, i32, i32, p, i64, i32, i64, p, p,
                                      i32, p, i64, p, size, p]
    lib.fi_indexer_workspace_size.restype = size
    lib.fi_indexer_workspace_size.argtypes = [i32]
    lib.fi_indexer_prefill.restype = i32
    lib.fi_indexer_prefill.argtypes = [p, i32, i32, i32, p, i64, i32, p, p, i64, p, p, p, p, size,
                                       p]
    return lib


def _check(lib, code):
    if code != 0:
        raise RuntimeError(lib.fi_last_error().decode())


def _stream():
    return torch.cuda.current_stream().cuda_stream


def make_call(lib, logits, out, k, form, sorted_output=False):
    """topk_per_row of logits [rows, width] into out [rows, k]: full rows, prefill form (ks / ke)
    or decode form (lengths); the workspace is allocated here and kept by the call."""
    rows, width = logits.shape
    dev = logits.device
    ws_bytes = lib.fi_topk_workspace_size(rows, width, k)
    workspace = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device=dev)
    if form == "prefill":
        ks = torch.zeros(rows, dtype=torch.int32, device=dev)
        ke = torch.full((rows,), width, dtype=torch.int32, device=dev)
        lengths = None
    else:
        ks = ke = None
        lengths = torch.full((rows,), width, dtype=torch.int32, device=dev)
    dtype = 1 if logits.dtype == torch.bfloat16 else 0
    ptr = lambda t: t.data_ptr() if t is not None else None

    def call():
        _check(lib, lib.fi_topk_per_row(
            out.data_ptr(), out.stride(0), logits.data_ptr(), dtype, rows, width,
            logits.stride(0), ptr(ks), ptr(ke), ptr(lengths), 1, k, int(sorted_output),
            workspace.data_ptr(), ws_bytes, _stream()))
    call.keep = (workspace, ks, ke, lengths)
    return call


def mqa_logits(lib, logits, q, k, kscale, weights, ks, ke, clean):
    """mqa_logits: q [rows, H, 128] e4m3, keys [keys, 128] e4m3 with fp32 scales, weights
    [rows, H], row ranges [rows] int32, into logits [rows, width] fp32."""
    rows, heads = q.shape[0], q.shape[1]
    _check(lib, lib.fi_mqa_logits(logits.data_ptr(), logits.stride(0), logits.shape[1],
                                  q.data_ptr(), rows, heads, k.data_ptr(), kscale.data_ptr(),
                                  k.shape[0], weights.data_ptr(), ks.data_ptr(), ke.data_ptr(),
                                  clean, _stream()))


def paged_mqa_logits(lib, inputs, logits, clean):
    """paged_mqa_logits on a bench.inputs.DecodeInputs step (2-D lengths), into logits
    [batch * next_n, width] fp32."""
    batch, next_n, heads = inputs.q.shape[0], inputs.q.shape[1], inputs.q.shape[2]
    _check(lib, lib.fi_paged_mqa_logits(
        logits.data_ptr(), logits.stride(0), logits.shape[1], inputs.q.data_ptr(), batch, next_n,
        heads, inputs.cache.data_ptr(), inputs.total_pages, inputs.page, inputs.page_bytes,
        inputs.weights.data_ptr(), inputs.lens2d.data_ptr(), 1, inputs.table.data_ptr(),
        inputs.table_cols, clean, _stream()))


def indexer_call(lib, inputs, batch, out, sorted_output, path, workspace, next_n=1, k=K):
    """indexer_decode on a DecodeInputs step; path: 1 dense, 2 fused."""
    def call():
        _check(lib, lib.fi_indexer_decode(
            out.data_ptr(), k, int(sorted_output), path, inputs.q.data_ptr(), batch, next_n,
            inputs.q.shape[2], inputs.cache.data_ptr(), inputs.total_pages, inputs.page,
            inputs.page_bytes, inputs.weights.data_ptr(), inputs.lens2d.data_ptr(), 1,
            inputs.table.data_ptr(), inputs.table_cols, workspace.data_ptr(), workspace.numel(),
            _stream()))
    return call


def prefill_call(lib, inputs, out, path, workspace, k=K, sorted_output=False):
    """indexer_prefill on a bench.inputs.PrefillInputs chunk; path: 1 dense, 2 fused."""
    def call():
        _check(lib, lib.fi_indexer_prefill(
            out.data_ptr(), k, int(sorted_output), path, inputs.q.data_ptr(), inputs.rows,
            inputs.heads, inputs.keys.data_ptr(), inputs.kscale.data_ptr(), inputs.width,
            inputs.weights.data_ptr(), inputs.ks.data_ptr(), inputs.ke.data_ptr(),
            workspace.data_ptr(), workspace.numel(), _stream()))
    return call


def add_only_argument(parser):
    """The --only filter of the A/B tools (bench.cases.selected reads it)."""
    parser.add_argument("--only", default="",
                        help="comma-separated substrings; run the cases whose name has one")
