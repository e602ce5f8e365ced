# SPDX-License-Identifier: Apache-2.0
"""Step planning (flashindexer/planning.h): prefill chunks under memory budgets, each chunk's row
bounds, the decode layouts, and block tables between page sizes, on the host: lengths are any
1-D integer array-likes (NumPy, lists); results are NumPy arrays and plain tuples. The decode
lengths also come as tensor ops (``decode_flat_lens_tensors``, ``decode_native_lens_tensors``)
over any tensor, CPU or CUDA, where a CUDA call reads its lengths on the device and can be
captured in a CUDA graph.

Key lengths are compressed (``seq_len // R``); sequence lengths are uncompressed and include
this step's tokens. A query at absolute position p sees ``(p + 1) // R`` compressed keys. A
chunk's row bounds also come as a tensor op (``prefill_row_bounds_tensors``), so that they can be
built on the device.
Under DCP (``dcp_ranks > 1``) every length is localized to ``dcp_rank`` (``dist.h``'s
``dcp_local_len``), per token, after the compression.
"""

from typing import NamedTuple

import numpy as np

from . import _C
from ._tensors import empty, is_cuda, raw, shape, stream_handle


class PrefillChunk(NamedTuple):
    """One chunk: requests [request_begin, request_end) and their query rows [query_begin,
    query_end) counted within the group, i.e. the prefill rows [token_begin, token_end);
    num_keys workspace keys; only the first sub-chunk of a group gathers them."""

    request_begin: int
    request_end: int
    query_begin: int
    query_end: int
    token_begin: int
    token_end: int
    num_keys: int
    gathers_keys: bool


_INT64 = np.dtype(np.int64)


def _lengths(values):
    # An engine's lengths are usually int64 arrays already; passing them through untouched saves
    # a few NumPy calls a length, which at a step's scale is a good part of its planning time.
    if type(values) is np.ndarray and values.dtype == _INT64 and values.ndim == 1 \
            and values.flags.c_contiguous:
        return values
    return np.ascontiguousarray(np.asarray(values).reshape(-1), dtype=np.int64)


def plan_prefill_chunks(key_lens, query_lens, workspace_keys, max_logits_bytes,
                        min_split_key_len=0, *, as_array=False):
    """Greedy, order-preserving prefill chunks under a K-workspace budget (keys) and an fp32
    logits budget (bytes); a request over a budget is taken alone, a group over the logits
    budget is cut into query sub-chunks sharing one gather, groups without keys are dropped.
    min_split_key_len (DeepSeek-V4.1): size every request as if it had at least that many keys.
    Returns a list of PrefillChunk, or with as_array=True the int64 array [chunks, 8] of their
    fields in PrefillChunk's order (gathers_keys as 0 / 1), which prefill_step_row_bounds takes
    as it is: a step plans without building a Python object per chunk.
    """
    rows = _C.plan_prefill_chunks(_lengths(key_lens), _lengths(query_lens), int(workspace_keys),
                                  int(max_logits_bytes), int(min_split_key_len))
    if as_array:
        return rows
    return [PrefillChunk(rb, re, qb, qe, tb, te, n, g != 0)
            for rb, re, qb, qe, tb, te, n, g in rows.tolist()]


def _out_buffer(buffer, name):
    if not (isinstance(buffer, np.ndarray) and buffer.dtype == np.int32 and buffer.ndim == 1
            and buffer.flags.c_contiguous):
        raise TypeError(f"out {name} must be a contiguous 1-D int32 NumPy array")
    return buffer


def _out_rows(buffer, rows, name):
    _out_buffer(buffer, name)
    if buffer.shape[0] < rows:
        raise ValueError(f"out {name} has {buffer.shape[0]} rows; the step has {rows}")
    return buffer[:rows]


def _chunk_row(chunk):
    return np.asarray(tuple(int(v) for v in chunk), dtype=np.int64)


def prefill_row_bounds(chunk, seq_lens, query_lens, compress_ratio=1, *, dcp_ranks=1,
                       dcp_interleave=1, dcp_rank=0):
    """(ks, ke, token_to_seq) of one chunk: int32 [query_end - query_begin] row bounds into the
    chunk's packed (local) workspace, and int32 [workspace keys] the chunk-relative request of
    every workspace key."""
    chunk_row = _chunk_row(chunk)
    seq = _lengths(seq_lens)
    options = (int(compress_ratio), int(dcp_ranks), int(dcp_interleave), int(dcp_rank))
    keys = _C.chunk_workspace_keys(chunk_row, seq, *options)
    rows = int(chunk[3]) - int(chunk[2])
    ks = np.empty(max(rows, 0), np.int32)
    ke = np.empty(max(rows, 0), np.int32)
    token_to_seq = np.empty(max(keys, 0), np.int32)
    _C.build_prefill_row_bounds(ks, ke, token_to_seq, chunk_row, seq, _lengths(query_lens),
                                *options)
    return ks, ke, token_to_seq


def prefill_step_row_bounds(chunks, seq_lens, query_lens, compress_ratio=1, *, dcp_ranks=1,
                            dcp_interleave=1, dcp_rank=0, out=None):
    """(ks, ke, offsets) of all of a step's chunks in one call: int32 arrays of every chunk's
    rows, chunk c's (as prefill_row_bounds gives them, without token_to_seq) at [offsets[c],
    offsets[c + 1]). chunks: a list of PrefillChunk or plan_prefill_chunks(..., as_array=True).
    out: optional (ks, ke) int32 1-D buffers of at least the step's rows, written in place and
    returned as views of that length (an engine's reused, e.g. pinned, staging buffers: fresh
    arrays of a long prefill step cost more in page faults than the planning itself)."""
    if isinstance(chunks, np.ndarray):
        fields = np.ascontiguousarray(chunks, dtype=np.int64).reshape(-1, 8)
    else:
        fields = np.array(chunks, dtype=np.int64).reshape(len(chunks), 8)
    offsets = np.zeros(fields.shape[0] + 1, np.int64)
    np.cumsum(fields[:, 3] - fields[:, 2], out=offsets[1:])
    fields = fields.reshape(-1)
    rows = int(offsets[-1])
    if out is None:
        ks = np.empty(rows, np.int32)
        ke = np.empty(rows, np.int32)
    else:
        ks, ke = (_out_rows(buffer, rows, name) for buffer, name in zip(out, ("ks", "ke")))
    _C.build_prefill_step_row_bounds(ks, ke, fields, _lengths(seq_lens), _lengths(query_lens),
                                     int(compress_ratio), int(dcp_ranks), int(dcp_interleave),
                                     int(dcp_rank))
    return ks, ke, offsets


def decode_flat_lens(seq_lens, query_lens, next_n, compress_ratio=1, *, rows=None, dcp_ranks=1,
                     dcp_interleave=1, dcp_rank=0):
    """Flattened decode layout: (row_lens, row_to_request), int32 [rows] each, one row per query
    token (rows defaults to sum(query_lens)); padding rows get length 0 and request ids
    len(seq_lens) + k."""
    query = _lengths(query_lens)
    count = int(query.sum()) if rows is None else int(rows)
    row_lens = np.empty(count, np.int32)
    row_to_request = np.empty(count, np.int32)
    _C.decode_flat_lens(row_lens, row_to_request, _lengths(seq_lens), query, int(next_n),
                        int(compress_ratio), int(dcp_ranks), int(dcp_interleave), int(dcp_rank))
    return row_lens, row_to_request


def decode_native_lens(seq_lens, next_n, compress_ratio=1, *, dcp_ranks=1, dcp_interleave=1,
                       dcp_rank=0):
    """Native decode layout: int32 [requests, next_n], [b, j] = max(0, L_b - next_n + j + 1) // R."""
    seq = _lengths(seq_lens)
    lens = np.empty(seq.shape[0] * int(next_n), np.int32)
    _C.decode_native_lens(lens, seq, int(next_n), int(compress_ratio), int(dcp_ranks),
                          int(dcp_interleave), int(dcp_rank))
    return lens.reshape(seq.shape[0], int(next_n))


def decode_pack_map(query_lens, max_d=None):
    """Maps between flattened decode rows and the left-aligned [requests, max_d] layout:
    (packed_row_of_token int32 [sum(query_lens)], token_of_packed_row int32 [requests * max_d],
    -1 on padding). Pack: packed = flat[token_of_packed_row] (padding rows filled by the caller);
    unpack: flat = packed[packed_row_of_token]."""
    query = _lengths(query_lens)
    width = (int(query.max()) if query.size else 1) if max_d is None else int(max_d)
    packed_row_of_token = np.empty(int(query.sum()), np.int32)
    token_of_packed_row = np.empty(query.shape[0] * max(width, 0), np.int32)
    _C.decode_pack_map(packed_row_of_token, token_of_packed_row, query, width)
    return packed_row_of_token, token_of_packed_row


def decode_row_ranges(rows, width, budget_bytes):
    """Contiguous decode row ranges [(begin, end), ...], largest first in units of 16 rows, whose
    bf16 logits [range rows, width] fit budget_bytes (0 = no budget: one range)."""
    bounds = _C.decode_row_ranges(int(rows), int(width), int(budget_bytes))
    return list(zip(bounds[0::2], bounds[1::2]))


class StepPlan(NamedTuple):
    """A step's plan (plan_step), each field what the separate call gives: chunks as
    plan_prefill_chunks(..., as_array=True); ks, ke, offsets as prefill_step_row_bounds; row_lens,
    row_to_request as decode_flat_lens; ranges as decode_row_ranges over row_lens' rows."""

    chunks: np.ndarray
    ks: np.ndarray
    ke: np.ndarray
    offsets: np.ndarray
    row_lens: np.ndarray
    row_to_request: np.ndarray
    ranges: list


# StepPlan from the binding's tuple of its fields, without NamedTuple's argument handling.
_new_step_plan = StepPlan._make
_NO_ROWS = np.empty(0, np.int32)  # plan_step's ks and ke without bounds: nothing is written


def plan_step(prefill_seq_lens, prefill_query_lens, decode_seq_lens, decode_query_lens, *,
              workspace_keys, max_logits_bytes, min_split_key_len=0, next_n=1, compress_ratio=1,
              decode_rows=None, decode_width=None, decode_logits_bytes=0, dcp_ranks=1,
              dcp_interleave=1, dcp_rank=0, out=None, row_bounds=True):
    """A whole step's host planning in one call, returning a StepPlan equal to the separate calls:
    plan_prefill_chunks over the prefill key lengths ``prefill_seq_lens // compress_ratio`` (with
    workspace_keys, max_logits_bytes, min_split_key_len), prefill_step_row_bounds of those chunks,
    decode_flat_lens of the decode requests (next_n, decode_rows) and decode_row_ranges of its
    rows, decode_width columns (None: the longest decode row) and decode_logits_bytes (0: no
    budget). compress_ratio and the DCP options apply to prefill and decode alike.
    out: optional (ks, ke) int32 1-D staging buffers of at least the chunks' rows
    (sum(prefill_query_lens) is always enough), written in place; ks and ke are views of their
    first offsets[-1] rows. row_bounds=False: no bounds are written (ks and ke come back empty)
    and no host loop runs over the prefill rows, for an engine that builds each chunk's on the
    device (prefill_row_bounds_tensors). Bad input raises ValueError naming the argument, before
    any output is written."""
    # Every argument goes to the binding as it is: it takes int64 arrays without a copy and
    # converts any other lengths itself, so a step pays for no NumPy call here.
    if decode_rows is None:
        decode_rows = -1
    elif decode_rows < 0:
        raise ValueError(f"plan_step: decode_rows={decode_rows}, expected >= 0")
    if not row_bounds:
        if out is not None:
            raise ValueError("plan_step: out is given but row_bounds=False writes no bounds")
        out = (_NO_ROWS, _NO_ROWS)
    ks, ke = (None, None) if out is None else out
    return _new_step_plan(_C.plan_step(
        ks, ke, prefill_seq_lens, prefill_query_lens, decode_seq_lens, decode_query_lens,
        workspace_keys, max_logits_bytes, min_split_key_len, next_n, compress_ratio, dcp_ranks,
        dcp_interleave, dcp_rank, decode_rows, -1 if decode_width is None else decode_width,
        decode_logits_bytes))


def reslice_block_table(block_table, allocation_page_size, kernel_page_size, key_lens=None):
    """The block table in kernel pages, when one page size is a whole multiple f of the other.

    block_table: [rows, cols] integer page ids of the allocation pages. Splitting (allocation
    page = f x kernel page): kernel column j is ``block_table[:, j // f] * f + j % f``. Merging
    (kernel page = f x allocation page, vLLM's ``block_table[:, ::f] // f``): every run of f pages
    that holds keys must be f consecutive ids from a multiple of f (ValueError otherwise). The
    slot ids of the allocation pages stay valid in the kernel pages.
    key_lens: [rows] keys per row, or None (every column holds keys); the kernel pages past a
    row's keys are -1 and the allocation pages past them are not read.
    Returns int32 [rows, cols * f] (splitting) or [rows, ceil(cols / f)] (merging).
    """
    table = np.ascontiguousarray(np.asarray(block_table), dtype=np.int32)
    if table.ndim != 2:
        raise ValueError(f"reslice_block_table: block_table has rank {table.ndim}, expected 2")
    cols = _C.resliced_block_table_cols(table.shape[1], int(allocation_page_size),
                                        int(kernel_page_size))
    out = np.empty((table.shape[0], cols), np.int32)
    lens = np.empty(0, np.int64) if key_lens is None else _lengths(key_lens)
    _C.reslice_block_table(out, table, int(allocation_page_size), int(kernel_page_size), lens)
    return out


def decode_flat_lens_tensors(seq_lens, query_lens, next_n, compress_ratio=1, *, rows=None,
                             row_lens=None, row_to_request=None, with_requests=True,
                             dcp_ranks=1, dcp_interleave=1, dcp_rank=0, stream=None):
    """``decode_flat_lens`` as a tensor op: seq_lens and query_lens are int32 / int64 [requests]
    tensors (CPU or CUDA), the outputs int32 [rows] tensors beside them (allocated unless given;
    ``rows`` defaults to requests * next_n, every token of a full batch). On CUDA tensors one
    kernel on the stream builds them from the lengths the device holds: no host read, graph-
    capturable; lengths no host check saw are clamped (planning.h) instead of raising. On CPU
    tensors the lengths are checked like ``decode_flat_lens``.
    Returns (row_lens, row_to_request), the second None when ``with_requests`` is false; with
    no rows there is nothing to write and nothing is checked.
    """
    if row_lens is None:
        count = shape(seq_lens, "decode_flat_lens: seq_lens")[0] * int(next_n)
        row_lens = empty(seq_lens, (count if rows is None else int(rows),), "i32")
    if row_to_request is None and with_requests:
        row_to_request = empty(seq_lens, (shape(row_lens, "decode_flat_lens: row_lens")[0],),
                               "i32")
    if shape(row_lens, "decode_flat_lens: row_lens")[0] == 0:
        return row_lens, (row_to_request if with_requests else None)  # no row to write
    _C.decode_flat_lens_tensor(raw(row_lens), raw(row_to_request) if with_requests else None,
                               raw(seq_lens), raw(query_lens), int(next_n), int(compress_ratio),
                               int(dcp_ranks), int(dcp_interleave), int(dcp_rank),
                               stream_handle(stream, [seq_lens]))
    return row_lens, (row_to_request if with_requests else None)


def prefill_row_bounds_tensors(chunk, seq_lens, query_lens, compress_ratio=1, *, ks=None,
                               ke=None, token_to_seq=None, with_token_to_seq=False, dcp_ranks=1,
                               dcp_interleave=1, dcp_rank=0, stream=None):
    """``prefill_row_bounds`` as a tensor op, for an engine that builds each chunk's bounds on
    the device that scores it: seq_lens and query_lens are int32 / int64 [requests] tensors (CPU
    or CUDA); ks, ke int32 [query_end - query_begin] and token_to_seq int32 tensors beside them
    (allocated unless given; token_to_seq only when given or ``with_token_to_seq``, of
    ``chunk.num_keys`` entries on CUDA, the chunk's local keys on the CPU). chunk: a PrefillChunk
    or its 8 fields (a row of ``plan_prefill_chunks(..., as_array=True)``).
    On CUDA tensors one kernel on the stream builds them from the lengths the device holds: no
    host read, graph-capturable; lengths no host check saw are clamped (planning.h), rows past
    them get ks = ke = 0 and token_to_seq entries past the chunk's keys -1. On CPU tensors the
    lengths and the chunk are checked like ``prefill_row_bounds``.
    Returns (ks, ke, token_to_seq), the last None without one."""
    chunk_row = _chunk_row(chunk)
    rows = max(int(chunk_row[3]) - int(chunk_row[2]), 0)
    if ks is None:
        ks = empty(seq_lens, (rows,), "i32")
    if ke is None:
        ke = empty(seq_lens, (rows,), "i32")
    if token_to_seq is None and with_token_to_seq:
        keys = int(chunk_row[6])
        if not is_cuda(seq_lens):
            keys = _C.chunk_workspace_keys(chunk_row, _lengths(np.from_dlpack(seq_lens)),
                                           int(compress_ratio), int(dcp_ranks),
                                           int(dcp_interleave), int(dcp_rank))
        token_to_seq = empty(seq_lens, (max(keys, 0),), "i32")
    if rows == 0 and (token_to_seq is None or
                      shape(token_to_seq, "build_prefill_row_bounds: token_to_seq")[0] == 0):
        return ks, ke, token_to_seq  # nothing to write (an empty array may not carry unit strides)
    _C.build_prefill_row_bounds_tensor(
        raw(ks), raw(ke), None if token_to_seq is None else raw(token_to_seq), chunk_row,
        raw(seq_lens),
        raw(query_lens), int(compress_ratio), int(dcp_ranks), int(dcp_interleave), int(dcp_rank),
        stream_handle(stream, [seq_lens]))
    return ks, ke, token_to_seq


def decode_native_lens_tensors(seq_lens, next_n, compress_ratio=1, *, out=None, dcp_ranks=1,
                               dcp_interleave=1, dcp_rank=0, stream=None):
    """``decode_native_lens`` as a tensor op: seq_lens an int32 / int64 [requests] tensor (CPU or
    CUDA), out int32 [requests, next_n] beside it (allocated unless given). CUDA: one kernel on
    the stream, no host read, graph-capturable. Returns out."""
    if out is None:
        out = empty(seq_lens, (shape(seq_lens, "decode_native_lens: seq_lens")[0], int(next_n)),
                    "i32")
    if 0 in shape(out, "decode_native_lens: out"):
        return out  # no request: nothing to write (an empty array may not carry unit strides)
    _C.decode_native_lens_tensor(raw(out), raw(seq_lens), int(next_n), int(compress_ratio),
                                 int(dcp_ranks), int(dcp_interleave), int(dcp_rank),
                                 stream_handle(stream, [seq_lens]))
    return out
