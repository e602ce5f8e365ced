// SPDX-License-Identifier: Apache-2.0
// The CUDA backend of a build without CUDA: every entry of cuda_ops.h, dcp/dcp.h,
// planning/planning.h and device_query.h, answering as the library does for CUDA tensors it
// cannot run (kUnsupported, the op named) or for a machine without a device. Compiled only when
// CUDA is off, so src/api calls its cuda:: entries the same way in every build.
#include "core/checks.h"
#include "cuda/candidates/candidates.h"
#include "cuda/cuda_ops.h"
#include "cuda/dcp/dcp.h"
#include "cuda/device_query.h"
#include "cuda/planning/planning.h"

namespace flashindexer::cuda {

bool backend_built() { return false; }
const char* built_archs() { return ""; }
int device_count() { return 0; }
int current_device() { return -1; }
bool compute_capability(int, int*, int*) { return false; }
std::string device_name(int) { return ""; }

Status dequantize_k_fp8(const TensorView&, const TensorView&, const TensorView&, void*) {
  return not_on_cuda("dequantize_k_fp8");
}

Status quantize_k_fp8(const TensorView&, const TensorView&, const TensorView&, void*) {
  return not_on_cuda("quantize_k_fp8");
}
Status quantize_mxfp4(const TensorView&, const TensorView&, const TensorView&, void*) {
  return not_on_cuda("quantize_mxfp4");
}
Status dequantize_mxfp4(const TensorView&, const TensorView&, const TensorView&, void*) {
  return not_on_cuda("dequantize_mxfp4");
}
Status insert_k_cache(const PagedKCache&, const TensorView&, const TensorView&, const RopeOptions&,
                      void*) {
  return not_on_cuda("insert_k_cache");
}
Status gather_k_workspace(const TensorView&, const TensorView&, const PagedKCache&,
                          const TensorView&, const TensorView&, void*) {
  return not_on_cuda("gather_k_workspace");
}
Status quantize_query_fp8(const TensorView&, const TensorView&, const TensorView&,
                          const TensorView&, const QueryQuantOptions&, void*) {
  return not_on_cuda("quantize_query_fp8");
}
Status quantize_query_mxfp4(const TensorView&, const TensorView&, const TensorView&,
                            const TensorView&, const TensorView&, const QueryQuantOptions&, void*) {
  return not_on_cuda("quantize_query_mxfp4");
}

Status mqa_logits(const TensorView&, const QuantizedTensor&, const QuantizedTensor&,
                  const TensorView&, const TensorView&, const TensorView&, bool, void*, void*,
                  size_t, bool*) {
  return not_on_cuda("mqa_logits");
}
size_t mqa_logits_workspace_size(int64_t, int, int64_t) { return 0; }

Status paged_mqa_logits(const TensorView&, const QuantizedTensor&, const PagedKCache&,
                        const TensorView&, const TensorView&, const TensorView&, bool, void*) {
  return not_on_cuda("paged_mqa_logits");
}

Status topk_per_row(const TensorView&, const TensorView&, const RowRanges&, int, bool,
                    const RunOptions&) {
  return not_on_cuda("topk_per_row");
}
size_t topk_per_row_workspace_size(int64_t, int64_t, int) { return 0; }
size_t topk_per_row_workspace_bound(int) { return 0; }

Status indexer_prefill(const TensorView&, const QuantizedTensor&, const QuantizedTensor&,
                       const TensorView&, const TensorView&, const TensorView&, int, bool,
                       IndexerPath, const IndexerOutputs&, const RunOptions&) {
  return not_on_cuda("indexer_prefill");
}
Status indexer_decode(const TensorView&, const QuantizedTensor&, const PagedKCache&,
                      const TensorView&, const TensorView&, const TensorView&, int, bool,
                      IndexerPath, const IndexerOutputs&, const RunOptions&) {
  return not_on_cuda("indexer_decode");
}
size_t indexer_workspace_size(int) { return 0; }
size_t indexer_workspace_size(int, int, int) { return 0; }

Status dcp_pack_candidates_from_scores(const TensorView&, const TensorView&, const TensorView&, int,
                                       int, const DcpGroup&, void*) {
  return not_on_cuda("dcp_pack_candidates_from_scores");
}
Status dcp_pack_candidates(const TensorView&, const TensorView&, const TensorView&,
                           const TensorView&, int, int, const DcpGroup&, void*) {
  return not_on_cuda("dcp_pack_candidates");
}
Status dcp_merge_topk(const TensorView&, const TensorView&, int, int, bool, void*) {
  return not_on_cuda("dcp_merge_topk");
}

Status prefill_row_bounds(const TensorView&, const TensorView&, const TensorView&, const ChunkRows&,
                          const TensorView&, const TensorView&, const planning::DecodeRule&,
                          void*) {
  return not_on_cuda("build_prefill_row_bounds");
}
Status decode_flat_lens(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                        int, const planning::DecodeRule&, void*) {
  return not_on_cuda("decode_flat_lens");
}
Status decode_native_lens(const TensorView&, const TensorView&, int, const planning::DecodeRule&,
                          void*) {
  return not_on_cuda("decode_native_lens");
}
Status select_candidate_blocks(const TensorView&, const TensorView&, const CandidateRows&, int, int,
                               const RunOptions&) {
  return not_on_cuda("select_candidate_blocks");
}
size_t select_candidate_blocks_workspace_size(int64_t, int64_t, int, int) { return 0; }
Status apply_candidate_mask(const TensorView&, const CandidateRows&, const TensorView&, int,
                            void*) {
  return not_on_cuda("apply_candidate_mask");
}
Status candidate_topk_per_row(const TensorView&, const TensorView&, const CandidateRows&,
                              const TensorView&, int, int, bool, bool, const RunOptions&) {
  return not_on_cuda("candidate_topk_per_row");
}
size_t candidate_topk_per_row_workspace_size(int64_t, int64_t, int, int, int) { return 0; }
Status candidate_blocks_to_sparse_indices(const TensorView&, const TensorView&, const TensorView&,
                                          const CandidateRows&, int, int, void*) {
  return not_on_cuda("candidate_blocks_to_sparse_indices");
}
Status sparse_topk_remap(const TensorView&, const TensorView&, const TensorView&,
                         const CandidateRows&, int, void*) {
  return not_on_cuda("sparse_topk_remap");
}
Status sparse_mqa_logits(const TensorView&, const QuantizedTensor&, const QuantizedTensor&,
                         const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                         int, bool, const RunOptions&) {
  return not_on_cuda("sparse_mqa_logits");
}
Status paged_sparse_mqa_logits(const TensorView&, const QuantizedTensor&, const PagedKCache&,
                               const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&, int, bool, const RunOptions&) {
  return not_on_cuda("paged_sparse_mqa_logits");
}
size_t sparse_logits_workspace_size(int64_t, int64_t) { return 0; }
size_t sparse_consumer_rows_size(int64_t, int, int) { return 0; }
Status build_sparse_consumer_rows_prefill(const TensorView&, const CandidateInput&,
                                          const TensorView&, const TensorView&, int64_t, void*) {
  return not_on_cuda("build_sparse_consumer_rows_prefill");
}
Status build_sparse_consumer_rows_decode(const TensorView&, const CandidateInput&,
                                         const TensorView&, const TensorView&, int,
                                         const PagedKCache&, void*) {
  return not_on_cuda("build_sparse_consumer_rows_decode");
}
Status candidate_indexer_prefill(const TensorView&, const QuantizedTensor&, const QuantizedTensor&,
                                 const TensorView&, const TensorView&, const TensorView&, int, bool,
                                 const CandidateInput&, IndexerPath, const RunOptions&,
                                 const TensorView&) {
  return not_on_cuda("indexer_prefill");
}
Status candidate_indexer_decode(const TensorView&, const QuantizedTensor&, const PagedKCache&,
                                const TensorView&, const TensorView&, const TensorView&, int, bool,
                                const CandidateInput&, IndexerPath, const RunOptions&,
                                const TensorView&) {
  return not_on_cuda("indexer_decode");
}

}  // namespace flashindexer::cuda
