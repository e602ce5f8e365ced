# SPDX-License-Identifier: Apache-2.0
"""Multi-GPU building blocks, free of any transport (C++: ``flashindexer/dist.h``).

Decode context parallelism (DCP): the keys of every request are dealt round-robin over ``ranks``
GPUs in runs of ``interleave`` keys; each rank runs ``topk_per_row`` over its own keys, packs its
winners with ``dcp_pack_candidates``, the engine all-gathers the packed blocks on its own
communicator (for example ``torch.distributed.all_gather_into_tensor``), and every rank merges
them with ``dcp_merge_topk`` into the global top-k: exactly what ``topk_per_row`` returns over the
concatenated, un-sharded keys, identical on every rank. Exchanging only each rank's local top-k
is exact (docs/design.md, "Multi-GPU").

Tensor-parallel (TP) prefill row sharding: ``tp_row_shard_plan`` splits the prefill rows into
contiguous windows of balanced cost, ``tp_row_shard_narrow`` gives one rank's part of a prefill
chunk; the engine then all-gathers the finished int32 rows (a concatenation).

The NCCL transport (C++ ``flashindexer/nccl.h``), where this build has it and libnccl.so.2 loads
(``has_nccl()``): ``NcclCommunicator`` wraps an engine's ``ncclComm_t`` or creates one from
``nccl_unique_id()``; ``dcp_topk_allgather`` runs pack, all-gather and merge in one call on CUDA
tensors, ``tp_allgather_rows`` shares every TP rank's finished rows. Without NCCL they raise
NotImplementedError.

Tensors follow the conventions of ``flashindexer.ops`` (any DLPack tensor, CPU or CUDA; outputs
allocated beside the inputs unless ``out=`` is given; ``stream``; ``cpu_threads``).
"""

from . import _C
from ._tensors import empty, raw, shape, stream_handle

MAX_DCP_TOPK = _C.MAX_DCP_TOPK

# ----------------------------------------------------------------------------------------------
# DCP key mapping (spec §9.1). Plain integer arithmetic: works on Python ints and on integer
# NumPy / PyTorch tensors alike.


def dcp_owner(g, ranks, interleave=1):
    """The rank that stores global key g: (g // I) % N."""
    return (g // interleave) % ranks


def dcp_local(g, ranks, interleave=1):
    """The position of global key g on its owner: (g // (I N)) I + g % I."""
    return (g // (interleave * ranks)) * interleave + g % interleave


def dcp_global(local, rank, ranks, interleave=1):
    """The global position of local key `local` of `rank`: (l // I) N I + r I + l % I."""
    return (local // interleave) * (ranks * interleave) + rank * interleave + local % interleave


def dcp_local_len(length, rank, ranks, interleave=1):
    """How many of the first `length` global keys `rank` stores."""
    base = (length // (interleave * ranks)) * interleave
    rest = length - base * ranks - rank * interleave
    if isinstance(rest, int):
        return base + min(max(rest, 0), interleave)
    return base + rest.clip(0, interleave)


# ----------------------------------------------------------------------------------------------
# DCP candidates


def dcp_pack_candidates(logits, local_topk, k, rank, ranks, *, interleave=1, row_starts=None,
                        out=None, stream=None, cpu_threads=0):
    """One rank's local top-k as 64-bit candidates (order-preserving score bits << 32 | ~global
    id; 0 for an empty slot), ready for an all-gather.

    logits: [rows, width] float32 or bfloat16, this rank's local logits.
    local_topk: [rows, >= k] int32, local positions relative to the row start, -1 = empty
    (what ``topk_per_row`` returns on the rank's shard).
    row_starts: [rows] int32, the local ks of each row (prefill); None = 0 (decode).
    1 <= k <= MAX_DCP_TOPK, 0 <= rank < ranks, interleave >= 1.
    Returns out [rows, k] int64. CPU tensors: indices are checked (ValueError); CUDA: an index
    outside the row packs as an empty slot instead (no sync).
    """
    rows = shape(logits, "dcp_pack_candidates: logits")[0]
    if out is None:
        out = empty(logits, (rows, k), "i64")
    _C.dcp_pack_candidates(raw(out), raw(logits), raw(local_topk), raw(row_starts), k, rank,
                           ranks, interleave, stream_handle(stream, [logits]), cpu_threads)
    return out


def dcp_pack_candidates_from_scores(scores, local_topk, k, rank, ranks, *, interleave=1, out=None,
                                    stream=None, cpu_threads=0):
    """dcp_pack_candidates from each slot's score instead of the logits: what a rank packs after
    ``indexer_prefill`` / ``indexer_decode`` with ``scores=True`` (the fused path writes no
    logits). Bit for bit the candidates dcp_pack_candidates packs from the logits the scores came
    from.

    scores: [rows, >= k] float32, scores[t, i] the score of local_topk[t, i].
    local_topk: [rows, >= k] int32 local positions, -1 = empty.
    Returns out [rows, k] int64. CPU tensors: indices checked (ValueError); CUDA: a negative index
    or one whose global id does not fit in int32 packs as an empty slot (no sync).
    """
    rows = shape(scores, "dcp_pack_candidates_from_scores: scores")[0]
    if out is None:
        out = empty(scores, (rows, k), "i64")
    _C.dcp_pack_candidates_from_scores(raw(out), raw(scores), raw(local_topk), k, rank, ranks,
                                       interleave, stream_handle(stream, [scores]), cpu_threads)
    return out


def dcp_merge_topk_cpu_workspace_size(ranks, k, threads=0):
    """Bytes of workspace dcp_merge_topk uses on CPU tensors (CUDA needs none)."""
    return int(_C.dcp_merge_topk_cpu_workspace_size(ranks, k, threads))


def dcp_merge_topk(gathered, k, ranks, *, sorted=False, out=None, workspace=None, stream=None,
                   cpu_threads=0):
    """The global top-k of every row from the all-gathered candidates of all ranks.

    gathered: int64, either [rows, ranks * k] (rank r's block at columns [r k, (r + 1) k)) or
    [rows, ranks, k] with any strides of its first two dimensions; the [ranks, rows, k] result
    of an all-gather of [rows, k] blocks is passed as ``gathered.transpose(0, 1)`` (PyTorch) or
    ``gathered.transpose(1, 0, 2)`` (NumPy), without a copy.
    Returns out [rows, k] int32 of global ids (relative to the row start of the un-sharded row),
    -1 after the min(n, k) valid ones; the same set as ``topk_per_row`` over the concatenated
    keys, best first when ``sorted``, else in ascending id order (the same bits on CPU and CUDA).
    """
    rows = shape(gathered, "dcp_merge_topk: gathered")[0]
    if out is None:
        out = empty(gathered, (rows, k), "i32")
    _C.dcp_merge_topk(raw(out), raw(gathered), k, ranks, sorted,
                      stream_handle(stream, [gathered]), workspace, cpu_threads)
    return out


# ----------------------------------------------------------------------------------------------
# TP prefill row sharding (host-side; CPU tensors)


def tp_row_shard_plan(costs, tp):
    """Rows per TP rank: a contiguous split of the prefill rows (in batch order) into tp windows
    whose largest cost is the smallest any contiguous split achieves.

    costs: [rows] int32 or int64 on the CPU, normally ke - ks (keys scored) per row.
    Returns sizes [tp] int32 (NumPy) summing to rows; every rank gets >= 1 row when rows >= tp.
    """
    import numpy as np

    sizes = np.empty(int(tp) if tp > 0 else 0, np.int32)
    _C.tp_row_shard_plan(sizes, raw(costs), tp)
    return sizes


def tp_row_shard_narrow(sizes, rank, first_prefill_row, chunk_row_start, chunk_ks, chunk_ke):
    """The part of a prefill chunk that TP rank `rank` computes (spec §10).

    Rank j owns the batch rows [first_prefill_row + sum(sizes[:j]), + sizes[j]); the chunk covers
    rows [chunk_row_start, chunk_row_start + len(chunk_ks)).
    sizes: [tp] int32 on the CPU; chunk_ks, chunk_ke: [chunk rows] int32 (any device).
    Returns None when the rank has no row of the chunk, else (start, end, ks, ke): the batch rows
    [start, end) and chunk_ks / chunk_ke sliced to them (views).
    """
    start, end = _C.tp_row_shard_narrow(raw(sizes), rank, first_prefill_row, chunk_row_start,
                                        raw(chunk_ks), raw(chunk_ke))
    if start >= end:
        return None
    offset = start - chunk_row_start
    return start, end, chunk_ks[offset:offset + end - start], chunk_ke[offset:offset + end - start]


# ----------------------------------------------------------------------------------------------
# NCCL


def has_nccl():
    """True when this build has the NCCL transport (C++ ``flashindexer/nccl.h``) and
    libnccl.so.2 can be loaded."""
    return bool(_C.has_nccl())


def nccl_version():
    """The loaded NCCL's version code (e.g. 22809 for 2.28.9), or 0 without NCCL."""
    return int(_C.nccl_version())


# ``NcclCommunicator.wrap(nccl_comm)`` wraps an engine's ``ncclComm_t`` (an integer address; never
# destroyed here); ``NcclCommunicator.create(unique_id, rank, world_size)`` creates one on the
# current CUDA device (collective; destroyed with the object). Properties: rank, size, owned,
# empty, handle.
NcclCommunicator = _C.NcclCommunicator


def nccl_unique_id():
    """A new NCCL unique id (128 bytes) for ``NcclCommunicator.create``: make it on one rank and
    send it to the others out of band (e.g. ``torch.distributed.broadcast_object_list``)."""
    return bytes(_C.nccl_unique_id())


def dcp_topk_allgather_workspace_size(rows, k, ranks):
    """Bytes of CUDA workspace dcp_topk_allgather needs (the gathered candidates)."""
    return int(_C.dcp_topk_allgather_workspace_size(rows, k, ranks))


def dcp_topk_allgather(logits, local_topk, k, comm, *, interleave=1, row_starts=None, out=None,
                       workspace=None, stream=None):
    """The global top-k of every row, identical on every DCP rank, in one call: packs this rank's
    candidates, all-gathers them over ``comm`` and merges them, on the CUDA stream.

    logits: [rows, width] float32 or bfloat16, CUDA: this rank's local logits.
    local_topk: [rows, >= k] int32, CUDA: this rank's ``topk_per_row`` over its shard.
    comm: an ``NcclCommunicator`` of the DCP group (its size is the number of ranks, its rank
    this rank's); interleave: the KV interleave I. row_starts: [rows] int32 local ks (prefill) or
    None (decode). workspace: dcp_topk_allgather_workspace_size(rows, k, comm.size) bytes on the
    device (allocated beside logits when None). out may be local_topk itself.
    Returns out [rows, k] int32: global ids relative to the un-sharded row start, best first, -1
    padded. A collective: every rank calls it with the same rows and k.
    """
    rows = shape(logits, "dcp_topk_allgather: logits")[0]
    if out is None:
        out = empty(logits, (rows, k), "i32")
    if workspace is None:
        workspace = empty(logits, (dcp_topk_allgather_workspace_size(rows, k, comm.size),), "u8")
    _C.dcp_topk_allgather(raw(out), raw(logits), raw(local_topk), raw(row_starts), k, interleave,
                          comm, stream_handle(stream, [logits]), workspace)
    return out


def tp_allgather_rows(buffer, sizes, first_row, comm, *, stream=None):
    """Every TP rank's finished rows on every rank: rank j owns the rows [first_row +
    sum(sizes[:j]), + sizes[j]) of ``buffer`` (int32 [rows, width], CUDA) and has written them;
    one grouped NCCL call copies each window to all other ranks. sizes: int32 [comm.size] on the
    CPU (a ``tp_row_shard_plan`` result). Rows outside the shared windows are not touched.
    A collective: every rank calls it with the same sizes and first_row. Returns buffer."""
    _C.tp_allgather_rows(raw(buffer), raw(sizes), int(first_row), comm,
                         stream_handle(stream, [buffer]))
    return buffer
