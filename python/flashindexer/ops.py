# SPDX-License-Identifier: Apache-2.0
"""Every op of the C++ API, over any DLPack tensor (PyTorch, CuPy, JAX, NumPy; CPU or CUDA).

Conventions shared by every op:

* Inputs are used in place (no copy); strides are honoured, the last dimension must be
  contiguous. Byte formats: FP8 e4m3 as torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn or uint8;
  packed MXFP4 (two E2M1 values per byte, low nibble = even element) and UE8M0 scales as uint8.
* Outputs are allocated beside the inputs (same framework and device) unless passed as ``out=``;
  an ``out=`` tensor may be a strided view (for example logits rows padded to a wider stride).
* ``stream``: the CUDA stream for CUDA tensors: an integer cudaStream_t, a torch.cuda.Stream or a
  CuPy stream. Default: PyTorch's current stream for PyTorch tensors, CuPy's for CuPy arrays.
* ``workspace``: scratch on the op's device. When omitted, the CPU ops allocate their own and the
  CUDA top-k and indexer get one allocated beside the inputs; pass one (``*_workspace_size``) to
  keep allocation off the hot path.
* ``cpu_threads``: 0 = the OpenMP default. Results never depend on it.
* Errors: ValueError (bad shape, stride, range, device), TypeError (bad dtype),
  NotImplementedError (valid, but this build or device cannot run it: today ``mqa_logits``,
  ``paged_mqa_logits``, ``indexer_prefill``, ``indexer_decode`` (FP8, D = 128), ``topk_per_row``,
  the quantizers, the query quantizers, ``insert_k_cache``, ``gather_k_workspace`` and the DCP
  pack / merge of ``flashindexer.dist`` run on CUDA tensors).
  Messages name the argument.
  The GIL is released while an op runs.
"""

from typing import Any, NamedTuple, Optional

import numpy as np

from . import _C
from ._tensors import (
    device_index,
    empty,
    framework,
    from_numpy,
    is_cuda,
    raw,
    shape,
    stream_handle,
)
from .cache import PagedKCache, PagedKeys, empty_k_cache


class QuantizedTensor(NamedTuple):
    """A quantized operand: values plus scales (None for FP8 queries, whose scale is in W).

    FP8 keys: values [N, D] e4m3, scales [N] float32.
    MXFP4:    values [..., D/2] uint8 (packed E2M1), scales [..., D/32] uint8 (UE8M0).
    """

    values: Any
    scales: Optional[Any] = None


def _quantized(name, operand):
    if isinstance(operand, (tuple, list)):
        if len(operand) != 2:
            raise ValueError(f"{name} has {len(operand)} parts, expected (values, scales)")
        return QuantizedTensor(operand[0], operand[1])
    return QuantizedTensor(operand, None)


# ----------------------------------------------------------------------------------------------
# Quantization


def quantize_k_fp8(input, *, out=None, stream=None, cpu_threads=0):
    """FP8 per-row quantization (spec §3.2) of keys or query heads.

    input: [N, D] float32 or bfloat16.
    Returns QuantizedTensor(values [N, D] e4m3, scales [N] float32) with
    scale[r] = 2^ceil(log2(max(amax_r, 1e-4) / 448)) and values = e4m3(input / scale).
    out: optional (values, scales) to write into.
    """
    dims = shape(input, "quantize_k_fp8: input")
    values, scales = out if out is not None else (
        empty(input, dims, "e4m3"), empty(input, dims[:1], "f32"))
    _C.quantize_k_fp8(raw(values), raw(scales), raw(input), stream_handle(stream, [input]),
                      cpu_threads)
    return QuantizedTensor(values, scales)


def dequantize_k_fp8(values, scales, *, out=None, stream=None, cpu_threads=0):
    """out[r, d] = e4m3(values[r, d]) * scales[r].

    values: [N, D] e4m3; scales: [N] float32. Returns out [N, D] float32. Runs on CPU or CUDA.
    """
    if out is None:
        out = empty(values, shape(values, "dequantize_k_fp8: values"), "f32")
    _C.dequantize_k_fp8(raw(out), raw(values), raw(scales), stream_handle(stream, [values]),
                        cpu_threads)
    return out


def quantize_mxfp4(input, *, out=None, stream=None, cpu_threads=0):
    """MXFP4 quantization (spec §3.3) over blocks of 32 values of the last dimension.

    input: [N, D] or [M, H, D] float32 or bfloat16, D a multiple of 32.
    Returns QuantizedTensor(values [..., D/2] uint8 packed E2M1 (element 2i in the low nibble),
    scales [..., D/32] uint8 UE8M0). out: optional (values, scales).
    """
    dims = shape(input, "quantize_mxfp4: input")
    values, scales = out if out is not None else (
        empty(input, dims[:-1] + (dims[-1] // 2,), "u8"),
        empty(input, dims[:-1] + (dims[-1] // 32,), "u8"))
    _C.quantize_mxfp4(raw(values), raw(scales), raw(input), stream_handle(stream, [input]),
                      cpu_threads)
    return QuantizedTensor(values, scales)


def dequantize_mxfp4(values, scales, *, out=None, stream=None, cpu_threads=0):
    """out[..., d] = e2m1(values) * 2^(scale byte - 127).

    values: [..., D/2] uint8; scales: [..., D/32] uint8. Returns out [..., D] float32.
    """
    if out is None:
        dims = shape(values, "dequantize_mxfp4: values")
        out = empty(values, dims[:-1] + (dims[-1] * 2,), "f32")
    _C.dequantize_mxfp4(raw(out), raw(values), raw(scales), stream_handle(stream, [values]),
                        cpu_threads)
    return out


# ----------------------------------------------------------------------------------------------
# The paged K cache


def insert_k_cache(cache: PagedKCache, keys, slot_mapping, *, rope=None, stream=None,
                   cpu_threads=0):
    """Quantizes ``keys`` (by the cache's format) and writes key i into slot slot_mapping[i].

    keys: [N', D] float32 or bfloat16 with N' >= N; slot_mapping: [N] int64 or int32; slots < 0
    are skipped; key ``slot`` lives in page slot // page_size, row slot % page_size. A slot past
    the cache is an error on CPU tensors and skipped on CUDA tensors (no host sync).
    rope: optional ``flashindexer.Rope`` applied to each key before its quantization.
    Writes cache.data in place and returns None.
    """
    if rope is not None:
        from .query import _rope_args

        _C.insert_k_cache_rope(cache, raw(keys), raw(slot_mapping),
                               stream=stream_handle(stream, [keys]), cpu_threads=cpu_threads,
                               **_rope_args(rope))
        return
    _C.insert_k_cache(cache, raw(keys), raw(slot_mapping), stream_handle(stream, [keys]),
                      cpu_threads)


def build_k_cache(sequences, page_size=64, format="fp8", *, shuffle_pages=False, seed=0):
    """Quantizes each request's keys into a new paged cache.

    sequences: a list of [n_b, D] float32 or bfloat16 tensors (one per request, one framework
    and device). Request b's keys get pages of their own, in order, or in a random permutation
    of the pages when ``shuffle_pages`` (as an engine's allocator leaves them).
    Returns PagedKeys(cache, block_table [B, P] int32, seq_lens [B] int32) beside the keys.
    """
    if not sequences:
        raise ValueError("build_k_cache: sequences is empty, expected one [n, D] tensor per "
                         "request")
    like = sequences[0]
    head_dim = int(like.shape[-1])
    lengths = [int(s.shape[0]) for s in sequences]
    pages_per_request = [(n + page_size - 1) // page_size for n in lengths]
    total_pages = sum(pages_per_request)
    order = np.arange(total_pages, dtype=np.int32)
    if shuffle_pages:
        order = np.random.default_rng(seed).permutation(total_pages).astype(np.int32)
    block_table = np.zeros((len(sequences), max(max(pages_per_request), 1)), dtype=np.int32)
    first = 0
    for b, pages in enumerate(pages_per_request):
        block_table[b, :pages] = order[first:first + pages]
        first += pages
    cache = empty_k_cache(max(total_pages, 1), page_size, head_dim, format, like=like)
    for b, keys in enumerate(sequences):
        positions = np.arange(lengths[b], dtype=np.int64)
        slots = block_table[b, positions // page_size].astype(np.int64) * page_size + (
            positions % page_size
        )
        insert_k_cache(cache, keys, from_numpy(like, slots))
    return PagedKeys(
        cache,
        from_numpy(like, block_table),
        from_numpy(like, np.asarray(lengths, dtype=np.int32)),
    )


def gather_k_workspace(cache: PagedKCache, block_table, cu_seq_lens, *, num_keys=None, out=None,
                       stream=None, cpu_threads=0):
    """Copies each request's keys out of the cache into the packed prefill workspace (§4.6).

    block_table: [R, P] int32; cu_seq_lens: [R + 1] int32, nondecreasing offsets.
    Returns QuantizedTensor(values, scales): FP8 values [Nws, D] e4m3 + scales [Nws] float32, or
    MXFP4 values [Nws, D/2] uint8 + scales [Nws, D/32] uint8. Nws = num_keys, by default
    cu_seq_lens[-1] (read from the tensor: pass num_keys for CUDA tensors to avoid a sync).
    """
    if out is None:
        if num_keys is None:
            num_keys = int(cu_seq_lens[-1])
        d = cache.head_dim
        if cache.format == "mxfp4":
            out = (empty(block_table, (num_keys, d // 2), "u8"),
                   empty(block_table, (num_keys, d // 32), "u8"))
        else:
            out = (empty(block_table, (num_keys, d), "e4m3"),
                   empty(block_table, (num_keys,), "f32"))
    values, scales = out
    _C.gather_k_workspace(raw(values), raw(scales), cache, raw(block_table), raw(cu_seq_lens),
                          stream_handle(stream, [block_table]), cpu_threads)
    return QuantizedTensor(values, scales)


# ----------------------------------------------------------------------------------------------
# Scoring


def mqa_logits(q, keys, weights, ks, ke, *, clean=True, out=None, workspace=None, stream=None,
               cpu_threads=0):
    """Prefill logits over the packed workspace:

        logit[t, s] = kscale[s] * sum_h W[t, h] * relu(q[t, h, :] . k[s, :]),  ks[t] <= s < ke[t]

    q: FP8 query values [M, H, D] e4m3 (scale folded into weights), or MXFP4
       (values [M, H, D/2] uint8, scales [M, H, D/32] uint8).
    keys: (values, scales): FP8 [N, D] e4m3 + [N] float32, or MXFP4 [N, D/2] + [N, D/32] uint8.
    weights: [M, H] float32; ks, ke: [M] int32 with 0 <= ks <= ke <= N. H in {32, 64},
    D in {64, 128}.
    Returns logits [M, N] float32 (out= may have a wider row stride); with ``clean`` every column
    outside a row's range is -inf, else left untouched.
    workspace: optional, MXFP4 on CUDA: a uint8 tensor of at least
    mqa_logits_cuda_workspace_size(M, H, N) bytes, where the operands are converted to e4m3 once
    and scored by the FP8 kernel (faster at prefill shapes; the same bits). Ignored otherwise.
    """
    q, keys = _quantized("q", q), _quantized("keys", keys)
    if out is None:
        rows = shape(weights, "mqa_logits: weights")[0]
        out = empty(weights, (rows, shape(keys.values, "mqa_logits: keys.values")[0]), "f32")
    _C.mqa_logits(raw(out), raw(q.values), raw(q.scales), raw(keys.values), raw(keys.scales),
                  raw(weights), raw(ks), raw(ke), clean, stream_handle(stream, [weights]),
                  raw(workspace), cpu_threads)
    return out


def mqa_logits_cuda_workspace_size(rows, heads, num_keys):
    """Bytes of mqa_logits' optional workspace for an MXFP4 call on CUDA tensors (rows x heads
    queries, num_keys keys); 0 in a build without CUDA."""
    return int(_C.mqa_logits_cuda_workspace_size(rows, heads, num_keys))


def paged_mqa_logits(q, cache: PagedKCache, weights, context_lens, block_table, *, width=None,
                     clean=True, out=None, stream=None, cpu_threads=0):
    """Decode logits over the paged cache. Row r = b * next_n + j sees context positions
    s < context_lens[b, j] (2-D form) or s < context_lens[b] - next_n + j + 1 (1-D form); the key
    at position s is in page block_table[b, s // page_size], row s % page_size.

    q: [B, next_n, H, D] e4m3, or MXFP4 (values [B, next_n, H, D/2], scales [B, next_n, H, D/32]);
    weights: [B * next_n, H] float32; context_lens: [B] or [B, next_n] int32;
    block_table: [B, P] int32. Returns logits [B * next_n, width] float32, width by default
    P * page_size (every position the block table can address).
    """
    q = _quantized("q", q)
    if out is None:
        if width is None:
            width = shape(block_table, "paged_mqa_logits: block_table")[1] * cache.page_size
        out = empty(weights, (shape(weights, "paged_mqa_logits: weights")[0], width), "f32")
    _C.paged_mqa_logits(raw(out), raw(q.values), raw(q.scales), cache, raw(weights),
                        raw(context_lens), raw(block_table), clean,
                        stream_handle(stream, [weights]), cpu_threads)
    return out


# ----------------------------------------------------------------------------------------------
# Selection


def topk_per_row_cpu_workspace_size(k, threads=0):
    """Bytes of workspace topk_per_row uses on CPU logits (independent of rows and width)."""
    return int(_C.topk_per_row_cpu_workspace_size(k, threads))


def topk_per_row_cuda_workspace_size(rows, width, k, device=-1):
    """Bytes of workspace topk_per_row needs on CUDA logits [rows, width] on CUDA `device`
    (-1: the current one); 0 when every row runs in one CTA or the build has no CUDA."""
    return int(_C.topk_per_row_cuda_workspace_size(rows, width, k, device))


def indexer_cpu_workspace_size(k, threads=0):
    """Bytes of workspace indexer_prefill / indexer_decode use on the CPU."""
    return int(_C.indexer_cpu_workspace_size(k, threads))


def indexer_cuda_workspace_size(k, device=-1, *, candidate_source=0,
                                candidate_source_block_size=0):
    """Recommended bytes of workspace for indexer_prefill / indexer_decode on CUDA `device` (-1:
    the current one): the top-k scratch plus a 256 MiB logits slab that the rows run through in
    batches. Independent of rows and keys; 0 when the build has no CUDA. candidate_source (C, an
    int) and candidate_source_block_size (cb): the size for a source layer's call, whose block
    scores take another 1/cb of the slab beside it."""
    return int(_C.indexer_cuda_workspace_size(k, device, int(candidate_source),
                                              int(candidate_source_block_size)))


# The default CUDA workspace of the indexer ops, kept per (framework, device, stream, k): it is
# 256 MiB and more, so allocating it per call costs more than many calls. Calls on one stream
# run in order, so they can share a buffer; calls on different streams may overlap, so each
# stream has its own.
_default_workspaces = {}


def _indexer_workspace(weights, k, workspace, stream):
    """The caller's workspace, or the cached recommended one beside CUDA inputs (None on the
    CPU)."""
    if workspace is not None or not is_cuda(weights):
        return workspace
    device = device_index(weights)
    key = (framework(weights), device, stream, int(k))
    cached = _default_workspaces.get(key)
    if cached is None:
        cached = empty(weights, (indexer_cuda_workspace_size(k, device),), "u8")
        _default_workspaces[key] = cached
    return cached


def topk_per_row(logits, k, *, ks=None, ke=None, lengths=None, next_n=1, sorted=False, out=None,
                 workspace=None, stream=None, cpu_threads=0):
    """The k best visible columns of every row, under one total order: larger score first,
    NaN below -inf, -0 == +0, ties to the smaller index.

    logits: [rows, width] float32 or bfloat16 (row stride >= width); 1 <= k <= 4096.
    Visible columns: prefill form ks, ke: [rows] int32 (ks[t] <= s < ke[t]); or decode form
    lengths: [rows] int32 (s < lengths[r]) or [B] int32 with next_n rows per request
    (s < lengths[r // next_n] - next_n + r % next_n + 1).
    Returns out [rows, k] int32 of indices relative to the row start (s - ks[t]); a row with
    n < k visible keys fills n slots and writes -1 into the rest. ``sorted``: best first;
    unsorted: ascending index order. Either way a row's answer is the same bits on every
    backend and whatever the batch it comes in.
    CUDA: asynchronous on the stream, graph-capturable; range values are not checked (clamped).
    """
    rows, width = shape(logits, "topk_per_row: logits")
    if out is None:
        out = empty(logits, (rows, k), "i32")
    if workspace is None and is_cuda(logits):
        needed = topk_per_row_cuda_workspace_size(rows, width, k, device_index(logits))
        if needed:
            workspace = empty(logits, (needed,), "u8")
    _C.topk_per_row(raw(out), raw(logits), k, raw(ks), raw(ke), raw(lengths), next_n, sorted,
                    stream_handle(stream, [logits]), workspace, cpu_threads)
    return out


# ----------------------------------------------------------------------------------------------
# Scoring + selection


class IndexerOutputs(NamedTuple):
    """What an indexer call returns when it is asked for more than its top-k: the top-k, the
    selected keys' scores (or None) and the candidate blocks of a source layer (or None)."""
    topk: Any
    scores: Any
    candidate_blocks: Any


def _indexer_outputs(weights, rows, k, scores, candidate_source):
    """The scores and candidate-block tensors of an indexer call: None (not asked for), True
    (scores: [rows, k] float32 allocated beside the inputs), an int C (candidate_source: [rows, C]
    int32 allocated), or the caller's tensor."""
    if scores is True:
        scores = empty(weights, (rows, k), "f32")
    elif scores is False:
        scores = None
    if isinstance(candidate_source, (int, np.integer)) and not isinstance(candidate_source, bool):
        candidate_source = empty(weights, (rows, int(candidate_source)), "i32")
    return scores, candidate_source


def _indexer_result(out, scores, candidate_source):
    if scores is None and candidate_source is None:
        return out
    return IndexerOutputs(out, scores, candidate_source)


def indexer_prefill(q, keys, weights, ks, ke, k, *, sorted=False, out=None, workspace=None,
                    stream=None, cpu_threads=0, path="auto", min_row_keys=0, candidates=None,
                    candidate_block_size=0, vllm_compatible=False, scores=None,
                    candidate_source=None, candidate_source_block_size=0, candidate_rows=None):
    """topk_per_row(mqa_logits(q, keys, weights, ks, ke), k, ks=ks, ke=ke), exactly, without the
    [M, N] logits in memory.

    q: [M, H, D] e4m3 (or MXFP4 (values, scales)); keys: (values [N, D] e4m3, scales [N] float32)
    (or MXFP4); weights: [M, H] float32; ks, ke: [M] int32, 0 <= ks <= ke <= N.
    Returns out [M, k] int32: key indices relative to ks[t], -1 past a row's visible keys.
    CUDA inputs: without ``workspace`` one of indexer_cuda_workspace_size(k) bytes is allocated
    at the first call and kept for later calls on the same device, stream and k; pass one to
    choose its size and lifetime (any size >= one batch of rows works).
    path: "auto", "dense", "fused" or (a consumer layer, with candidates) "sparse": which CUDA
    implementation runs (same answer bit for bit).
    min_row_keys: the fewest keys any row sees (min of ke - ks), when the caller knows it without
    reading ks / ke back (0: unknown). "auto" takes the fused path when k <= 2048 and the rows
    are long enough for it to be level or ahead (thresholds measured per k, lower when the chunk
    packs several requests; cuda_prefill_path tells the path of given arguments), else the dense
    one. A wrong value costs time, never the answer. Ignored on the CPU.
    candidates: a DeepSeek-V4.1 consumer layer's [M, C] int32 candidate blocks of
    ``candidate_block_size`` positions (flashindexer.candidates): the rows select only inside
    them, exactly candidate_topk_per_row of the logits with (ks, ke) as bounds (vllm_compatible:
    vLLM's mask-then-top-k). On CUDA path="sparse" scores only the candidate blocks' keys
    (exact form, candidate_block_size 8, 16 or 32), "dense" the whole context; the same answer.
    "auto" takes "sparse" when it can and the logits width is at least 4 x C x
    candidate_block_size (2 x at decode), else "dense" (indexer.h).
    candidate_rows: the step's sparse rows (flashindexer.candidates.
    build_sparse_consumer_rows_prefill over the same candidates, ks and ke), which a call on the
    sparse path reads instead of building its own: built once, shared by every consumer layer.
    scores: True (or a [M, >= k] float32 tensor to fill) to also return each selected key's
    score, the very bits mqa_logits writes at column ks[t] + out[t, i], -inf where out is -1 (what
    flashindexer.dist.dcp_pack_candidates_from_scores packs; the fused path's -0.0 / NaN corner
    is in indexer.h). Not with candidates and vllm_compatible.
    candidate_source: a DeepSeek-V4.1 source layer's candidate output, C (an int: [M, C] int32 is
    allocated) or an [M, C] int32 tensor to fill, blocks of ``candidate_source_block_size``
    positions: exactly select_candidate_blocks(mqa_logits(...), ks, ke, C, cb), while ``out``
    stays the unrestricted top-k. On CUDA the fused path publishes them when the block size is
    a multiple of 8 (else "fused" raises NotImplementedError and "auto" takes the dense path);
    MXFP4 takes the dense path. Not with candidates.
    Returns out, or IndexerOutputs(topk, scores, candidate_blocks) when scores or
    candidate_source is given.
    """
    q, keys = _quantized("q", q), _quantized("keys", keys)
    rows = shape(weights, "indexer_prefill: weights")[0]
    if out is None:
        out = empty(weights, (rows, k), "i32")
    scores, candidate_source = _indexer_outputs(weights, rows, k, scores, candidate_source)
    stream = stream_handle(stream, [weights])
    workspace = _indexer_workspace(weights, k, workspace, stream)
    _C.indexer_prefill(raw(out), raw(q.values), raw(q.scales), raw(keys.values),
                       raw(keys.scales), raw(weights), raw(ks), raw(ke), k, sorted, stream,
                       workspace, cpu_threads, path, min_row_keys, raw(candidates),
                       candidate_block_size, vllm_compatible, raw(scores), raw(candidate_source),
                       candidate_source_block_size, raw(candidate_rows))
    return _indexer_result(out, scores, candidate_source)


def indexer_decode(q, cache: PagedKCache, weights, context_lens, block_table, k, *, sorted=False,
                   out=None, workspace=None, stream=None, cpu_threads=0, path="auto",
                   candidates=None, candidate_block_size=0, vllm_compatible=False, scores=None,
                   candidate_source=None, candidate_source_block_size=0, candidate_rows=None):
    """topk_per_row(paged_mqa_logits(...), k) exactly, without the logits in memory.

    q: [B, next_n, H, D] e4m3 (or MXFP4 (values, scales)); cache: PagedKCache;
    weights: [B * next_n, H] float32; context_lens: [B] or [B, next_n] int32;
    block_table: [B, P] int32. Returns out [B * next_n, k] int32 of context positions, -1 past
    a row's visible keys. CUDA inputs: workspace and path as indexer_prefill.
    candidates ([B * next_n, C] int32), candidate_block_size, vllm_compatible: as
    indexer_prefill, with each row's own visible range as its bounds (logits width
    P * page_size); candidate_rows from build_sparse_consumer_rows_decode.
    scores, candidate_source, candidate_source_block_size: as indexer_prefill, with column
    out[t, i] (the position) of paged_mqa_logits, and for the candidate output each of the
    B * next_n rows seeing [0, its decode length) (row_repeat 1) over P * page_size columns.
    """
    q = _quantized("q", q)
    rows = shape(weights, "indexer_decode: weights")[0]
    if out is None:
        out = empty(weights, (rows, k), "i32")
    scores, candidate_source = _indexer_outputs(weights, rows, k, scores, candidate_source)
    stream = stream_handle(stream, [weights])
    workspace = _indexer_workspace(weights, k, workspace, stream)
    _C.indexer_decode(raw(out), raw(q.values), raw(q.scales), cache, raw(weights),
                      raw(context_lens), raw(block_table), k, sorted, stream, workspace,
                      cpu_threads, path, raw(candidates), candidate_block_size, vllm_compatible,
                      raw(scores), raw(candidate_source), candidate_source_block_size,
                      raw(candidate_rows))
    return _indexer_result(out, scores, candidate_source)


# ----------------------------------------------------------------------------------------------
# The build


def build_info():
    """What this build contains: {'version', 'cuda', 'cuda_archs', 'compiler', 'nccl'} ('nccl':
    built with NCCL support and libnccl.so.2 loads in this process)."""
    return dict(_C.build_info())


def cuda_device_count():
    """CUDA devices visible now (0 without the CUDA backend or a GPU). Initialises CUDA."""
    return int(_C.cuda_device_count())


def cuda_prefill_path(k, path="auto", min_row_keys=0, num_keys=0):
    """"dense" or "fused": the CUDA implementation indexer_prefill runs with these arguments over
    a chunk of num_keys packed keys (0: unknown, taken as one request). "auto" is "fused" when
    k <= 2048 and min_row_keys reaches a threshold measured per k (28672 keys at k <= 512, 36864
    at k <= 1024, 45056 up to 2048; 17408, 23552 and 34816 when num_keys is at least twice
    min_row_keys, i.e. the chunk packs several requests); else "dense"."""
    return _C.cuda_prefill_path(int(k), path, int(min_row_keys), int(num_keys))


def cuda_device_runs_kernels(device=0, reason=False):
    """Whether this build's CUDA kernels run on CUDA device `device`: they are built for sm_90a,
    so compute capability 9.0 only (H100, H200, H20, GH200); elsewhere the ops raise
    NotImplementedError on CUDA tensors. With reason=True, returns (bool, why not)."""
    why = _C.cuda_device_refusal(int(device))
    return (not why, why) if reason else not why
