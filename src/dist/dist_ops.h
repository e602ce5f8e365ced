// The CPU implementations of the transport-free multi-GPU functions (flashindexer/dist.h).
// Arguments arrive validated by src/ops/dist.cpp; these functions only compute.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashindexer/dist.h"
#include "flashindexer/tensor.h"

namespace flashindexer::dist {

void dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                         const TensorView& local_topk, const TensorView& row_starts, int k,
                         int rank, const DcpGroup& group, int threads);

// workspace: threads * dcp_merge_thread_workspace_bytes(ranks, k) bytes.
void dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                    bool sorted, int threads, void* workspace);
size_t dcp_merge_thread_workspace_bytes(int ranks, int k);

// sizes[0, tp) from costs[0, rows) (both plain arrays; see tp_row_shard_plan in dist.h).
void tp_row_shard_plan(int32_t* sizes, const int64_t* costs, int64_t rows, int tp);

}  // namespace flashindexer::dist
