# SPDX-License-Identifier: Apache-2.0
"""DeepSeek-V4.1 two-level selection: candidate blocks (spec §8; flashindexer/candidates.h).

A candidate *source* layer publishes, per query row, the C blocks of ``block_size`` (cb)
request-local positions with the largest block scores (:func:`select_candidate_blocks`);
*consumer* layers then select only inside those blocks, on dense logits
(:func:`candidate_topk_per_row`, or ``indexer_prefill`` / ``indexer_decode`` with
``candidates=``) or on the sparse logits of the candidate keys alone
(:func:`candidate_blocks_to_sparse_indices`, then :func:`sparse_topk_remap`).

Row bounds are vLLM's: ``ks`` ([R] int32, None = every row starts at 0: the decode form), ``ke``
([R] or [B, n] int32) and ``row_repeat`` (logits row t reads bound row t // row_repeat); the row
sees columns [ks, min(ke, width)).

Block order: the max of the block's visible logits descending (NaN propagates and ranks equal to
+inf, an empty block scores -inf), the newest visible block pinned to +inf, ties to the smaller
block id. Every path returns the same blocks.
"""

from . import _C
from ._tensors import device_index, empty, is_cuda, raw, shape, stream_handle
from .cache import PagedKCache
from .ops import _quantized

MAX_CANDIDATE_BLOCKS = _C.MAX_CANDIDATE_BLOCKS


def _workspace(like, size, workspace):
    if workspace is not None or not is_cuda(like):
        return workspace
    return empty(like, (size,), "u8")


def select_candidate_blocks(logits, num_blocks, block_size, *, ke, ks=None, row_repeat=1,
                            out=None, workspace=None, stream=None, cpu_threads=0):
    """The source's candidate blocks: out [rows, num_blocks] int32, best first, -1 for blocks that
    score -inf and for unused slots. logits: [rows, width] float32."""
    dims = shape(logits, "select_candidate_blocks: logits")
    rows, width = dims[0], dims[-1]
    if out is None:
        out = empty(logits, (rows, num_blocks), "i32")
    if is_cuda(logits):
        workspace = _workspace(logits, select_candidate_blocks_cuda_workspace_size(
            rows, width, num_blocks, block_size, device_index(logits)), workspace)
    _C.select_candidate_blocks(raw(out), raw(logits), num_blocks, block_size, raw(ks), raw(ke),
                               row_repeat, stream_handle(stream, [logits]), workspace, cpu_threads)
    return out


def apply_candidate_mask(logits, candidates, block_size, *, ke, ks=None, row_repeat=1,
                         stream=None, cpu_threads=0):
    """vLLM's mask, in place: -inf at every column outside [ks, ke) or outside the named blocks,
    except the last column when a candidate starts past the width (the edge flag). Returns
    logits."""
    _C.apply_candidate_mask(raw(logits), raw(candidates), block_size, raw(ks), raw(ke), row_repeat,
                            stream_handle(stream, [logits]), cpu_threads)
    return logits


def candidate_topk_per_row(logits, candidates, block_size, k, *, ke, ks=None, row_repeat=1,
                           sorted=False, vllm_compatible=False, out=None, workspace=None,
                           stream=None, cpu_threads=0):
    """The consumer's top-k on dense logits: out [rows, k] int32 of positions (relative to ks).

    Exact (default): the k best visible positions inside the named blocks, -1 past them.
    vllm_compatible: apply_candidate_mask (in place on logits) then the row's plain top-k, which
    fills rows whose blocks hold fewer than k positions with masked ones and keeps the edge
    column, as vLLM's dense consumer does."""
    dims = shape(logits, "candidate_topk_per_row: logits")
    rows, width = dims[0], dims[-1]
    if out is None:
        out = empty(logits, (rows, k), "i32")
    if is_cuda(logits):
        num_blocks = shape(candidates, "candidate_topk_per_row: candidates")[-1]
        workspace = _workspace(logits, candidate_topk_per_row_cuda_workspace_size(
            rows, width, num_blocks, block_size, k, device_index(logits)), workspace)
    _C.candidate_topk_per_row(raw(out), raw(logits), raw(candidates), block_size, k, raw(ks),
                              raw(ke), row_repeat, sorted, vllm_compatible,
                              stream_handle(stream, [logits]), workspace, cpu_threads)
    return out


def candidate_blocks_to_sparse_indices(candidates, block_size, sparse_block, *, ke, ks=None,
                                       row_repeat=1, sparse_indices=None, end=None, stream=None,
                                       cpu_threads=0):
    """The sparse consumer's metadata (spec §8.5): (sparse_indices [rows, C * cb / SBK] int32,
    end [rows] int32). sparse_block (SBK) is 8 or 16 and divides block_size with ratio 1 or 2;
    C is a power of two."""
    dims = shape(candidates, "candidate_blocks_to_sparse_indices: candidates")
    rows, count = dims[0], dims[-1]
    if sparse_indices is None:
        sparse_indices = empty(candidates, (rows, count * (block_size // max(sparse_block, 1))),
                               "i32")
    if end is None:
        end = empty(candidates, (rows,), "i32")
    _C.candidate_blocks_to_sparse_indices(raw(sparse_indices), raw(end), raw(candidates),
                                          block_size, sparse_block, raw(ks), raw(ke), row_repeat,
                                          stream_handle(stream, [candidates]), cpu_threads)
    return sparse_indices, end


def sparse_consumer_rows_size(rows, num_candidates, block_size):
    """Bytes of a consumer step's sparse rows (build_sparse_consumer_rows_*); 0 without CUDA."""
    return _C.sparse_consumer_rows_size(int(rows), int(num_candidates), int(block_size))


def _sparse_rows_out(candidates, block_size, out):
    if out is not None:
        return out
    rows, count = shape(candidates, "build_sparse_consumer_rows: candidates")
    return empty(candidates, (max(sparse_consumer_rows_size(rows, count, block_size), 1),), "u8")


def build_sparse_consumer_rows_prefill(candidates, block_size, ks, ke, num_keys, *, out=None,
                                       stream=None):
    """A prefill consumer step's sparse rows on CUDA (candidates.h): built once from the step's
    [M, C] int32 candidates (cb 8, 16 or 32), ks, ke and the chunk's num_keys, then passed as
    candidate_rows= to each consumer layer's indexer_prefill over the same rows. Returns a
    uint8 tensor (or fills ``out``, at least sparse_consumer_rows_size(M, C, cb) bytes)."""
    out = _sparse_rows_out(candidates, block_size, out)
    _C.build_sparse_consumer_rows_prefill(raw(out), raw(candidates), block_size, raw(ks), raw(ke),
                                          int(num_keys), stream_handle(stream, [candidates]))
    return out


def build_sparse_consumer_rows_decode(candidates, block_size, context_lens, block_table, next_n,
                                      cache, *, out=None, stream=None):
    """A decode consumer step's sparse rows on CUDA: from the [B * next_n, C] int32 candidates,
    context_lens and block_table as indexer_decode takes them, and one of the step's caches (its
    page size and page count), for candidate_rows= of each layer's indexer_decode."""
    out = _sparse_rows_out(candidates, block_size, out)
    _C.build_sparse_consumer_rows_decode(raw(out), raw(candidates), block_size, raw(context_lens),
                                         raw(block_table), int(next_n), cache,
                                         stream_handle(stream, [candidates]))
    return out


def sparse_topk_remap(columns, sparse_indices, sparse_block, *, ks=None, row_repeat=1, out=None,
                      stream=None, cpu_threads=0):
    """Sparse top-k columns back to positions: (sparse_indices[t, c // SBK] - ks // SBK) * SBK +
    c % SBK for 0 <= c < S * SBK, -1 otherwise. out may be columns (in place)."""
    if out is None:
        out = empty(columns, tuple(shape(columns, "sparse_topk_remap: columns")), "i32")
    _C.sparse_topk_remap(raw(out), raw(columns), raw(sparse_indices), sparse_block, raw(ks),
                         row_repeat, stream_handle(stream, [columns]), cpu_threads)
    return out


def _sparse_logits_buffers(op, weights, sparse_indices, sparse_block, out, workspace):
    """The sparse logits ops' output ([rows, S * SBK] float32 unless given) and, on CUDA, their
    workspace."""
    rows, blocks = shape(sparse_indices, f"{op}: sparse_indices")
    if out is None:
        out = empty(weights, (rows, blocks * sparse_block), "f32")
    if is_cuda(weights):
        workspace = _workspace(weights, sparse_logits_cuda_workspace_size(rows, blocks),
                               workspace)
    return out, workspace


def sparse_mqa_logits(q, keys, weights, sparse_indices, end, sparse_block, *, ks, ke,
                      clean=True, out=None, workspace=None, stream=None, cpu_threads=0):
    """Sparse logits over the packed workspace (spec §8.5): column j * SBK + o of row t is the
    logit of key sparse_indices[t, j] * SBK + ks[t] % SBK + o, for the columns below end[t]
    (-inf from there to S * SBK when ``clean``). Same bits as :func:`mqa_logits` for each key.
    q, keys, weights as mqa_logits; sparse_indices [rows, S] and end [rows] int32 as
    :func:`candidate_blocks_to_sparse_indices` writes them (ks, ke: the bounds it took).
    Returns logits [rows, S * SBK] float32."""
    (q_values, q_scales), (k_values, k_scales) = _quantized("q", q), _quantized("keys", keys)
    out, workspace = _sparse_logits_buffers("sparse_mqa_logits", weights, sparse_indices,
                                            sparse_block, out, workspace)
    _C.sparse_mqa_logits(raw(out), raw(q_values), raw(q_scales), raw(k_values), raw(k_scales),
                         raw(weights), raw(sparse_indices), raw(end), raw(ks), raw(ke),
                         sparse_block, clean, stream_handle(stream, [weights]), raw(workspace),
                         cpu_threads)
    return out


def paged_sparse_mqa_logits(q, cache: PagedKCache, weights, sparse_indices, end, block_table,
                            sparse_block, *, clean=True, out=None, workspace=None, stream=None,
                            cpu_threads=0):
    """Sparse logits over the paged cache: column j * SBK + o of row t (= b * next_n + i) is the
    logit of position sparse_indices[t, j] * SBK + o of request b, for the columns below end[t].
    Same bits as :func:`paged_mqa_logits` for each position. Returns [rows, S * SBK] float32."""
    q_values, q_scales = _quantized("q", q)
    out, workspace = _sparse_logits_buffers("paged_sparse_mqa_logits", weights, sparse_indices,
                                            sparse_block, out, workspace)
    _C.paged_sparse_mqa_logits(raw(out), raw(q_values), raw(q_scales), cache, raw(weights),
                               raw(sparse_indices), raw(end), raw(block_table), sparse_block,
                               clean, stream_handle(stream, [weights]), raw(workspace),
                               cpu_threads)
    return out


def sparse_logits_cuda_workspace_size(rows, sparse_blocks):
    """Bytes of CUDA workspace the sparse logits ops need for rows x S sparse blocks."""
    return int(_C.sparse_logits_cuda_workspace_size(rows, sparse_blocks))


def select_candidate_blocks_cuda_workspace_size(rows, width, num_blocks, block_size, device=-1):
    """Bytes of CUDA workspace select_candidate_blocks needs for this shape."""
    return int(_C.select_candidate_blocks_cuda_workspace_size(rows, width, num_blocks, block_size,
                                                              device))


def candidate_topk_per_row_cuda_workspace_size(rows, width, num_blocks, block_size, k, device=-1):
    """Bytes of CUDA workspace candidate_topk_per_row needs for this shape."""
    return int(_C.candidate_topk_per_row_cuda_workspace_size(rows, width, num_blocks, block_size,
                                                             k, device))
