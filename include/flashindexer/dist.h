// SPDX-License-Identifier: Apache-2.0
// Multi-GPU building blocks, free of any transport: decode context parallelism (DCP) and
// tensor-parallel (TP) prefill row sharding. An engine runs these around its own collective
// (an all-gather on its own communicator); docs/design.md, "Multi-GPU", has the proofs.
//
// DCP. The key sequence of every request is dealt round-robin over N ranks in runs of I keys
// (I = the KV-cache interleave size): key g (a position in the full, un-sharded sequence) lives
// on rank owner(g) at local position local(g). Query rows are replicated on every rank. Each rank
// runs the ordinary top-k (topk.h) over its local keys, packs its k local winners as 64-bit
// candidates of (score, global id), the engine all-gathers the candidates, and every rank merges
// the N*k candidates into the global top-k: exactly the set topk_per_row returns over the
// concatenated, un-sharded row (same total order, ties to the smaller global id), and the same
// bits on every rank.
//
// TP row sharding. Every TP rank would compute the same prefill top-k; instead the prefill rows
// are split into tp contiguous windows of balanced cost (the number of scored keys), each rank
// computes its window and the engine all-gathers the finished int32 rows (a concatenation).
#pragma once

#include <cstdint>

#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer {

// The largest k the DCP merge serves (vLLM uses 512, 1024 and 2048).
inline constexpr int kMaxDcpTopK = 2048;

// ---------------------------------------------------------------------------------------------
// DCP key mapping (int64 arithmetic; preconditions: ranks >= 1, interleave >= 1, positions and
// lengths >= 0, 0 <= rank < ranks).

struct DcpGroup {
  int ranks = 1;       // N, the DCP world size
  int interleave = 1;  // I, keys per run dealt to one rank
};

// The rank that stores global key g: (g / I) % N.
inline constexpr int64_t dcp_owner(int64_t g, const DcpGroup& group) {
  return (g / group.interleave) % group.ranks;
}

// The position of global key g on its owner: (g / (I N)) I + g % I.
inline constexpr int64_t dcp_local(int64_t g, const DcpGroup& group) {
  return (g / (static_cast<int64_t>(group.interleave) * group.ranks)) * group.interleave +
         g % group.interleave;
}

// The global position of local key l of rank r: (l / I) N I + r I + l % I.
inline constexpr int64_t dcp_global(int64_t l, int64_t rank, const DcpGroup& group) {
  const int64_t interleave = group.interleave;
  return (l / interleave) * (group.ranks * interleave) + rank * interleave + l % interleave;
}

// How many of the first `length` global keys rank r stores:
// base + clamp(length - base N - r I, 0, I) with base = (length / (I N)) I.
inline constexpr int64_t dcp_local_len(int64_t length, int64_t rank, const DcpGroup& group) {
  const int64_t interleave = group.interleave;
  const int64_t base = (length / (interleave * group.ranks)) * interleave;
  const int64_t rest = length - base * group.ranks - rank * interleave;
  return base + (rest < 0 ? 0 : rest > interleave ? interleave : rest);
}

// ---------------------------------------------------------------------------------------------
// DCP top-k merge

// A packed candidate is a 64-bit rank key: (order-preserving bits of the fp32 score) << 32 |
// ~global_id, so a larger key ranks first under the total order of topk.h (NaN lowest of all
// scores, -0 == +0, equal scores: the smaller global id first). An empty slot is 0, below every
// real candidate. Exact for global ids < 2^31 (the ids are returned as i32).

// Packs one rank's local top-k as candidates.
//   candidates: [rows, >= k] i64 (out), row stride >= k; columns k and beyond are not touched.
//   logits:     [rows, width] f32 or bf16, this rank's local logits (the ones local_topk was
//               selected from).
//   local_topk: [rows, >= k] i32, local positions relative to the row start, -1 = empty slot
//               (what topk_per_row writes; any order).
//   row_starts: [rows] i32, the local ks of each row (prefill); an undefined view = 0 for every
//               row (decode).
// On CPU tensors the values are checked: every index is -1 or inside [0, width - row_start),
// and every global id fits in int32. On CUDA tensors they are not (that would need a host sync):
// a row start is clamped to [0, width], and an index outside the row or whose global id does not
// fit in int32 packs as an empty slot; valid inputs give the CPU's bits. CUDA: asynchronous on
// options.cuda_stream, no allocation, graph-capturable.
Status dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                           const TensorView& local_topk, const TensorView& row_starts, int k,
                           int rank, const DcpGroup& group, const RunOptions& options = {});

// The same candidates from each slot's score instead of the logits: what a rank packs after an
// indexer call that returned its selected scores (IndexerOptions::scores), so DCP runs after the
// fused indexer too, which writes no logits.
//   scores:     [rows, >= k] f32, scores[t, i] the score of local_topk[t, i] (read only where
//               local_topk[t, i] >= 0).
//   local_topk: [rows, >= k] i32, local positions, -1 = empty slot.
// Bit for bit dcp_pack_candidates over the logits the scores were read from. CPU tensors: every
// index is -1 or >= 0 and every global id fits in int32 (checked). CUDA tensors: not checked (a
// host sync); a negative index or one whose global id does not fit packs as an empty slot.
Status dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                       const TensorView& local_topk, int k, int rank,
                                       const DcpGroup& group, const RunOptions& options = {});

// Merges the gathered candidates of all ranks into the global top-k of every row.
//   out:      [rows, >= k] i32 (out): global ids (relative to the row start of the full,
//             un-sharded row), -1 padding after the min(n, k) valid ones; columns k and beyond
//             are not touched. Sorted best first when topk_options.sorted, else in ascending
//             id order.
//   gathered: the N packed candidate blocks, rank-major, either
//             [rows, N * k] i64 (rank r's candidates at columns [r k, (r + 1) k)), or
//             [rows, N, k] i64 with any strides of its first two dimensions, e.g. strides
//             {k, rows * k, 1} view the [N, rows, k] buffer an ncclAllGather of [rows, k] blocks
//             produces, with no transpose.
// The result depends only on the candidates (not on their order, the rank or the thread count).
// CPU: needs dcp_merge_topk_cpu_workspace_size() bytes of scratch (allocated per call when
// options.workspace is null). CUDA: no scratch, asynchronous on options.cuda_stream, no host
// synchronization, graph-capturable. Either way the output is the same bits on both backends and
// on every run.
Status dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                      const TopKOptions& topk_options = {}, const RunOptions& options = {});

size_t dcp_merge_topk_cpu_workspace_size(int ranks, int k, int threads = 0);

// ---------------------------------------------------------------------------------------------
// TP prefill row sharding (host-side planning; CPU tensors)

// Splits `rows` prefill rows, in batch order, into tp contiguous windows.
//   sizes: [tp] i32 (out): rows of each rank, summing to rows.
//   costs: [rows] i32 or i64, the cost of each row, normally ke - ks (keys scored); >= 0.
// The split minimises the largest window cost (no contiguous split does better, in particular
// not the equal split by row count); among such splits it follows the prefix-sum targets
// total * (j + 1) / tp. Every rank gets >= 1 row when rows >= tp; with fewer rows the first
// `rows` ranks get one row each and the others none.
Status tp_row_shard_plan(const TensorView& sizes, const TensorView& costs, int tp);

// The part of a prefill chunk one TP rank computes.
struct TpRowWindow {
  int64_t start = 0;  // first row, in the batch's row numbering
  int64_t end = 0;    // one past the last row; start == end: the rank has no row of this chunk
  TensorView ks;      // chunk_ks / chunk_ke narrowed to [start, end) (views of the caller's
  TensorView ke;      // tensors; undefined when the window is empty)
  bool empty() const { return start >= end; }
};

// Rank `rank` owns the batch rows [first_prefill_row + sum(sizes[:rank]), + sizes[rank]) (the
// prefill rows follow `first_prefill_row` decode rows). For a chunk covering the rows
// [chunk_row_start, chunk_row_start + chunk_ks.size(0)), with per-row bounds chunk_ks/chunk_ke
// ([chunk rows] i32, any device), writes the intersection to *window.
//   sizes: [tp] i32, CPU (a tp_row_shard_plan result).
Status tp_row_shard_narrow(TpRowWindow* window, const TensorView& sizes, int rank,
                           int64_t first_prefill_row, int64_t chunk_row_start,
                           const TensorView& chunk_ks, const TensorView& chunk_ke);

}  // namespace flashindexer
