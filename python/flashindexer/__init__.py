# SPDX-License-Identifier: Apache-2.0
"""FlashIndexer: the sparse-attention indexer of DeepSeek Sparse Attention models.

For every query row it scores every visible key,

    logit[t, s] = kscale[s] * sum_h W[t, h] * relu(q[t, h, :] . k[s, :])   (FP8 or MXFP4 inputs)

and returns the indices of the top-k keys, exactly and deterministically. The ops take any
DLPack tensor (PyTorch, CuPy, JAX, NumPy; CPU or CUDA) without copying; see ``flashindexer.ops``
for the conventions (outputs, workspace, streams, errors) and each op's shapes and dtypes.

``flashindexer.reference`` is a NumPy oracle for your tests; ``flashindexer.torch`` registers
the ops as torch.library custom ops (importing it imports PyTorch; this package does not).
Importing this package never initialises CUDA.
"""

from . import _C, candidates, dist, planning, reference
from .candidates import (
    apply_candidate_mask,
    build_sparse_consumer_rows_decode,
    build_sparse_consumer_rows_prefill,
    candidate_blocks_to_sparse_indices,
    candidate_topk_per_row,
    paged_sparse_mqa_logits,
    select_candidate_blocks,
    sparse_consumer_rows_size,
    sparse_logits_cuda_workspace_size,
    sparse_mqa_logits,
    sparse_topk_remap,
)
from .dist import (
    dcp_merge_topk,
    dcp_pack_candidates,
    dcp_pack_candidates_from_scores,
    has_nccl,
    tp_row_shard_narrow,
    tp_row_shard_plan,
)
from .planning import (
    PrefillChunk,
    StepPlan,
    decode_flat_lens,
    decode_native_lens,
    decode_pack_map,
    decode_row_ranges,
    plan_prefill_chunks,
    plan_step,
    prefill_row_bounds,
    prefill_step_row_bounds,
    reslice_block_table,
)
from .cache import PagedKCache, PagedKeys, bytes_per_key, empty_k_cache, page_bytes
from .query import Rope, default_query_weight_scale, quantize_query_fp8, quantize_query_mxfp4
from .ops import (
    IndexerOutputs,
    QuantizedTensor,
    build_info,
    build_k_cache,
    cuda_device_count,
    cuda_device_runs_kernels,
    cuda_prefill_path,
    dequantize_k_fp8,
    dequantize_mxfp4,
    gather_k_workspace,
    indexer_cpu_workspace_size,
    indexer_cuda_workspace_size,
    indexer_decode,
    indexer_prefill,
    insert_k_cache,
    mqa_logits,
    mqa_logits_cuda_workspace_size,
    paged_mqa_logits,
    quantize_k_fp8,
    quantize_mxfp4,
    topk_per_row,
    topk_per_row_cpu_workspace_size,
    topk_per_row_cuda_workspace_size,
)

__version__ = _C.__version__
MAX_TOPK = _C.MAX_TOPK

__all__ = [
    "MAX_TOPK", "PagedKCache", "PagedKeys", "QuantizedTensor", "build_info",
    "build_k_cache", "bytes_per_key", "cuda_device_count", "cuda_device_runs_kernels",
    "cuda_prefill_path", "dequantize_k_fp8",
    "dequantize_mxfp4", "empty_k_cache", "gather_k_workspace",
    "indexer_cpu_workspace_size",
    "indexer_cuda_workspace_size", "indexer_decode",
    "indexer_prefill", "insert_k_cache", "mqa_logits", "mqa_logits_cuda_workspace_size",
    "page_bytes", "paged_mqa_logits",
    "quantize_k_fp8", "quantize_mxfp4", "reference", "topk_per_row",
    "topk_per_row_cpu_workspace_size", "topk_per_row_cuda_workspace_size",
]
__all__ += [
    "dcp_merge_topk", "dcp_pack_candidates", "dcp_pack_candidates_from_scores", "dist", "has_nccl",
    "tp_row_shard_narrow",
    "tp_row_shard_plan",
]
__all__ += [
    "PrefillChunk", "StepPlan", "decode_flat_lens", "decode_native_lens", "decode_pack_map",
    "decode_row_ranges", "planning", "plan_prefill_chunks", "plan_step", "prefill_row_bounds",
    "prefill_step_row_bounds", "reslice_block_table",
]
__all__ += ["IndexerOutputs"]
__all__ += ["Rope", "default_query_weight_scale", "quantize_query_fp8", "quantize_query_mxfp4"]
__all__ += [
    "apply_candidate_mask", "candidate_blocks_to_sparse_indices", "candidate_topk_per_row",
    "candidates", "paged_sparse_mqa_logits", "select_candidate_blocks",
    "sparse_logits_cuda_workspace_size", "sparse_mqa_logits", "sparse_topk_remap",
    "build_sparse_consumer_rows_decode", "build_sparse_consumer_rows_prefill",
    "sparse_consumer_rows_size",
]
