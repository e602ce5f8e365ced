// SPDX-License-Identifier: Apache-2.0
// Step planning on the host: what an engine computes from host-side lengths, before any kernel
// runs, to split a prefill into chunks under memory budgets, bound each chunk's rows, and lay out
// a decode batch. The host planner touches no device and allocates no tensor: lengths come in as
// host spans, results go out into caller-owned spans or vectors (a vector is cleared and
// refilled, so reusing one across steps allocates nothing once it has grown). The decode lengths
// also exist as tensor ops (last section), for steps whose lengths live on the device and that
// run inside a CUDA graph.
//
// Units. Key lengths are compressed lengths (N_r = seq_len / R for a layer of compress ratio R);
// sequence lengths are uncompressed and include this step's tokens. A query at absolute position
// p sees the first n_vis(p) = floor((p + 1) / R) compressed keys of its request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "flashindexer/dist.h"
#include "flashindexer/kcache.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

// ---------------------------------------------------------------------------------------------
// Prefill chunking (greedy, order preserving)
//
// Requests are taken in batch order into a group while the group's keys fit the K workspace and
// its dense logits [group queries, group keys] fp32 fit the logits budget; a request that alone
// exceeds a budget forms a group by itself. A group whose logits would still exceed the budget is
// cut into query sub-chunks of at most max(1, max_logits_bytes / 4 / group_keys) rows; they share
// the group's gathered workspace (only the first gathers). Groups with no keys are dropped (their
// rows stay -1).

struct PrefillChunkBudget {
  int64_t workspace_keys = 0;    // K workspace capacity, in keys (> 0)
  int64_t max_logits_bytes = 0;  // fp32 logits budget of one chunk, in bytes (>= 4)
  // Sizing floor of every request's key length (0 = none). DeepSeek-V4.1's sparse backend sizes
  // chunks as if every row had the sparse width: min_split_key_len = (2 * sparse_cols + 3) / 4.
  // It changes only how requests are grouped; the chunks report their real key counts.
  int64_t min_split_key_len = 0;
};

struct PrefillChunk {
  int32_t request_begin = 0;  // the group's requests: [request_begin, request_end)
  int32_t request_end = 0;
  int64_t query_begin = 0;  // this chunk's query rows, counted within the group
  int64_t query_end = 0;
  int64_t token_begin = 0;  // the same rows, counted within the whole prefill batch
  int64_t token_end = 0;
  int64_t num_keys = 0;      // the group's workspace keys (real, unclamped lengths)
  bool gathers_keys = true;  // the first sub-chunk of a group gathers; later ones reuse it
};

// Plans the chunks of one prefill step.
//   key_lens:   [requests] compressed key lengths N_r (>= 0)
//   query_lens: [requests] query lengths M_r (>= 0), same size
// On failure `chunks` is left empty.
Status plan_prefill_chunks(std::vector<PrefillChunk>& chunks, std::span<const int64_t> key_lens,
                           std::span<const int64_t> query_lens, const PrefillChunkBudget& budget);

// ---------------------------------------------------------------------------------------------
// Per-row key bounds of one chunk
//
// For query i of request r (absolute position p = seq_len_r - query_len_r + i), with cu[r] the
// request's first key in the chunk's packed workspace:
//   ks[row] = cu[r],  ke[row] = cu[r] + n_vis(p)
// Workspace key s is visible to a row iff ks <= s < ke. Under DCP (ranks > 1) every rank packs
// only its local keys: cu[r] sums dcp_local_len(N_r, rank) and ke = cu[r] +
// dcp_local_len(n_vis(p), rank).

struct RowBoundsOptions {
  int compress_ratio = 1;  // R >= 1
  DcpGroup dcp{};          // ranks == 1: no context parallelism
  int dcp_rank = 0;        // 0 <= dcp_rank < dcp.ranks
};

// The key count of a chunk's workspace on this rank (the size token_to_seq must have): the sum of
// dcp_local_len(S_r / R, rank) over its requests. -1 when the chunk's requests are not within
// seq_lens or the options or lengths are invalid.
int64_t chunk_workspace_keys(const PrefillChunk& chunk, std::span<const int64_t> seq_lens,
                             const RowBoundsOptions& options = {});

// Writes the bounds of the chunk's rows [query_begin, query_end) and, when token_to_seq is
// non-empty, the chunk-relative request (r - request_begin) of every workspace key.
//   ks, ke:       [query_end - query_begin] i32 (out)
//   token_to_seq: [chunk_workspace_keys(...)] i32 (out), or empty to skip it
//   seq_lens:     [requests] uncompressed sequence lengths S_r, this step included
//   query_lens:   [requests] M_r <= S_r
// The chunk's key count must equal the sum of S_r / R over its requests (as the planner saw it).
Status build_prefill_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                                std::span<int32_t> token_to_seq, const PrefillChunk& chunk,
                                std::span<const int64_t> seq_lens,
                                std::span<const int64_t> query_lens,
                                const RowBoundsOptions& options = {});

// The row bounds of all of a step's chunks in one call (no token_to_seq): chunk c's rows go to
// [offset_c, offset_c + query_end - query_begin) of ks and ke, offset_c counting the rows of the
// chunks before it, each as build_prefill_row_bounds writes them.
//   ks, ke: [the chunks' rows in all] i32 (out)
Status build_prefill_step_row_bounds(std::span<int32_t> ks, std::span<int32_t> ke,
                                     std::span<const PrefillChunk> chunks,
                                     std::span<const int64_t> seq_lens,
                                     std::span<const int64_t> query_lens,
                                     const RowBoundsOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Decode metadata
//
// Request b has total length L_b (uncompressed, this step included) and d_b <= next_n query
// tokens this step; token i (0 <= i < d_b) sees len_{b,i} = (L_b - d_b) + i + 1 positions, in
// keys floor(len_{b,i} / R), then localized by dcp_local_len under DCP.

// Flattened layout: one row per query token, requests in order, rows beyond sum(d_b) are padding.
//   row_lens:       [rows >= sum(d_b)] i32 (out): per-row key lengths, 0 on padding rows
//   row_to_request: [rows] i32 (out), or empty: the request of each row; padding row k gets
//                   requests + k (distinct ids past the batch, as a varlen kernel expects)
//   seq_lens:       [requests] L_b;  query_lens: [requests] d_b, 1 <= d_b <= min(next_n, L_b)
Status decode_flat_lens(std::span<int32_t> row_lens, std::span<int32_t> row_to_request,
                        std::span<const int64_t> seq_lens, std::span<const int64_t> query_lens,
                        int next_n, const RowBoundsOptions& options = {});

// Native layout [requests, next_n], row-major: [b, j] = max(0, L_b - next_n + j + 1) / R, then
// localized. For a padded batch pass next_n = max(d_b) (left-aligned rows, see decode_pack_map).
//   lens: [requests * next_n] i32 (out)
Status decode_native_lens(std::span<int32_t> lens, std::span<const int64_t> seq_lens, int next_n,
                          const RowBoundsOptions& options = {});

// Index maps between the flattened rows and the left-aligned [requests, max_d] padded layout:
//   packed_row_of_token: [sum(d_b)] i32 (out): token t of request b -> b * max_d + i
//   token_of_packed_row: [requests * max_d] i32 (out): the inverse, -1 on padding
// Packing gathers rows through token_of_packed_row; unpacking gathers through
// packed_row_of_token. Packing then unpacking is the identity.
Status decode_pack_map(std::span<int32_t> packed_row_of_token,
                       std::span<int32_t> token_of_packed_row, std::span<const int64_t> query_lens,
                       int max_d);

// Decode row chunking under a bf16 logits budget: `rows` rows of `width` columns processed as
// contiguous ranges [begin, end), the largest first, in units of 16 rows. One range (the whole
// batch) when rows == 0, budget_bytes == 0 (no budget) or rows * width * 2 <= budget_bytes.
// Errors: budget_bytes < 0; a budget that does not fit 16 rows.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};
Status decode_row_ranges(std::vector<RowRange>& ranges, int64_t rows, int64_t width,
                         int64_t budget_bytes);

// ---------------------------------------------------------------------------------------------
// A whole step in one call
//
// What an engine plans per step, with one validation of the lengths and no second pass over
// them: the prefill chunks over the prefill requests' key lengths S_r / R, every chunk's row
// bounds (build_prefill_step_row_bounds), the flattened decode rows (decode_flat_lens) and their
// row ranges under the decode logits budget (decode_row_ranges). Each output equals what those
// calls give on the same lengths and options, bit for bit, and the call fails wherever one of
// them would.

struct StepLengths {
  std::span<const int64_t> prefill_seq_lens;    // [prefill requests] S_r (the chunker sees S_r / R)
  std::span<const int64_t> prefill_query_lens;  // [prefill requests] M_r <= S_r, 0 allowed
  std::span<const int64_t> decode_seq_lens;     // [decode requests] L_b
  std::span<const int64_t> decode_query_lens;   // [decode requests] 1 <= d_b <= min(next_n, L_b)
};

struct StepPlanOptions {
  PrefillChunkBudget budget;  // the prefill chunks' budgets
  RowBoundsOptions bounds;    // compress ratio and DCP rank of the layer, prefill and decode alike
  int next_n = 1;             // the most decode tokens of one request (>= 1)
  // The decode logits' columns the row ranges are cut for; -1: the longest decode row (the keys
  // the rank's paged logits span, max_context_len).
  int64_t decode_width = -1;
  int64_t decode_logits_bytes = 0;  // decode_row_ranges' bf16 budget (0: no budget, one range)
};

// The step's plan besides the caller's buffers. Reusing one across steps allocates nothing once
// its vectors have grown.
struct StepPlan {
  std::vector<int64_t> prefill_key_lens;  // [prefill requests] S_r / R, as the chunker saw them
  std::vector<PrefillChunk> chunks;       // plan_prefill_chunks
  // [chunks + 1]: chunk c's rows of ks and ke are [chunk_row_offsets[c], chunk_row_offsets[c + 1])
  std::vector<int64_t> chunk_row_offsets;
  int64_t decode_width = 0;             // the width the decode ranges were cut for
  std::vector<RowRange> decode_ranges;  // decode_row_ranges over decode_row_lens' rows
};

//   ks, ke:                [>= the chunks' rows] i32 (out); only the first
//                          chunk_row_offsets.back() are written (sum(M_r) is always enough).
//                          Both empty: no bounds are written, for an engine that builds each
//                          chunk's on the device (the tensor form of build_prefill_row_bounds)
//   decode_row_lens:       [rows >= sum(d_b)] i32 (out), padding rows as in decode_flat_lens
//   decode_row_to_request: [rows] i32 (out), or empty to skip it
// On failure the plan's vectors are left empty and no output is written.
Status plan_step(StepPlan& plan, std::span<int32_t> ks, std::span<int32_t> ke,
                 std::span<int32_t> decode_row_lens, std::span<int32_t> decode_row_to_request,
                 const StepLengths& lengths, const StepPlanOptions& options);

// ---------------------------------------------------------------------------------------------
// Block tables and cache views between page sizes
//
// An engine may allocate its K cache in pages of a size the kernels do not take. When one page
// size is a whole multiple of the other (factor f), the block table and the cache view are
// re-expressed in kernel pages; slot ids stay valid unchanged (slot = page * page_size + row in
// both views, the writers and readers all using the kernel view):
//   allocation page = f x kernel page: allocation page a is kernel pages a f .. a f + f - 1, so
//     kernel column j of a row is block_table[row, j / f] * f + j % f;
//   kernel page = f x allocation page (vLLM's block_table[:, ::f] // f): every run of f
//     allocation pages that holds keys must be f consecutive ids starting at a multiple of f
//     (checked); kernel column j is block_table[row, j f] / f.
// key_lens, when given, marks which pages hold keys: a row's kernel pages past its keys become -1
// and only the allocation pages holding keys are read (and must be >= 0). Empty: every column of
// block_table holds keys.

// The kernel table's columns for a block table of `cols` columns: cols * f or ceil(cols / f);
// -1 when the page sizes are not positive multiples of one another or cols < 0.
int64_t resliced_block_table_cols(int64_t cols, int allocation_page_size, int kernel_page_size);

//   kernel_table: [rows, resliced_block_table_cols(cols, ...)] i32 (out), row-major
//   block_table:  [rows, cols] i32, row-major
//   key_lens:     [rows] keys of each row (cache slots, <= cols * allocation_page_size), or empty
Status reslice_block_table(std::span<int32_t> kernel_table, std::span<const int32_t> block_table,
                           int64_t rows, int64_t cols, int allocation_page_size,
                           int kernel_page_size, std::span<const int64_t> key_lens = {});

// The view of `cache` (allocation pages) in pages of kernel_page_size keys: page_size =
// kernel_page_size, and page_stride_bytes / f with f times the pages (splitting), or
// page_stride_bytes * f with num_pages / f pages (merging; a last incomplete group is left out).
// The kernel page must fit its stride, and a split stride stay a multiple of 4 bytes.
Status reslice_k_cache(PagedKCache& kernel_cache, const PagedKCache& cache, int kernel_page_size);

// ---------------------------------------------------------------------------------------------
// A chunk's row bounds as a tensor op (CPU or CUDA)
//
// build_prefill_row_bounds above, from lengths held in tensors and into tensors, so that an
// engine builds a chunk's ks / ke (and token_to_seq) on the device that scores it: no host loop
// over the chunk's rows and no copy of them to the device (vLLM builds them in a kernel too). The
// chunk comes from the host planner (plan_prefill_chunks, or plan_step without its bounds). On
// CUDA tensors one kernel on options.cuda_stream, no allocation, no host read of the lengths,
// graph-capturable; valid lengths give the host op's values bit for bit.
// On CPU tensors the lengths and the chunk are checked as the host op checks them. On CUDA tensors
// only the chunk's own ranges are (the lengths live on the device): S_r is clamped to
// [0, 2^31 - 1] and M_r to [0, S_r]; rows past the clamped lengths' queries get ks = ke = 0 (no
// visible key), token_to_seq entries past the chunk's keys get -1, and nothing outside the
// outputs is written, so bad lengths give wrong bounds but never a stray write.
//   ks, ke:       [query_end - query_begin] i32 (out)
//   token_to_seq: [keys] i32 (out), or an undefined view; CPU: keys = chunk_workspace_keys(...),
//                 CUDA: any size, the entries past it not written
//   seq_lens:     [requests] i32 or i64, S_r;  query_lens: [requests] i32 or i64, M_r
// CUDA: every CTA scans the chunk's request lengths (a few microseconds for a few thousand
// requests) and writes its share of the rows and keys.
Status build_prefill_row_bounds(const TensorView& ks, const TensorView& ke,
                                const TensorView& token_to_seq, const PrefillChunk& chunk,
                                const TensorView& seq_lens, const TensorView& query_lens,
                                const RowBoundsOptions& bounds = {},
                                const RunOptions& options = {});

// ---------------------------------------------------------------------------------------------
// Decode lengths as tensor ops (CPU or CUDA)
//
// decode_flat_lens / decode_native_lens above, from lengths held in tensors: on CUDA tensors one
// kernel on options.cuda_stream, no allocation, no host read of the lengths, graph-capturable (a
// captured step replays with whatever lengths the device holds then). Valid lengths give the host
// planner's values bit for bit on either device.
// On CPU tensors the lengths are checked as the host planner checks them. On CUDA tensors they
// cannot be (that needs a sync); instead each request's length is clamped to [0, 2^31 - 1] and its
// token count to [0, min(next_n, length)], and rows past row_lens' end are not written, so bad
// lengths give wrong rows but never a write outside the outputs.
//   row_lens:       [rows] i32 (out); rows past the tokens are padding (length 0)
//   row_to_request: [rows] i32 (out), or an undefined view; padding row k gets requests + k
//   seq_lens:       [requests] i32 or i64, L_b;  query_lens: [requests] i32 or i64, d_b
// CUDA: one CTA scans the token counts, so the time grows with requests (a few microseconds for
// a few thousand).
Status decode_flat_lens(const TensorView& row_lens, const TensorView& row_to_request,
                        const TensorView& seq_lens, const TensorView& query_lens, int next_n,
                        const RowBoundsOptions& bounds = {}, const RunOptions& options = {});

//   lens:     [requests, next_n] i32 (out), any strides
//   seq_lens: [requests] i32 or i64
Status decode_native_lens(const TensorView& lens, const TensorView& seq_lens, int next_n,
                          const RowBoundsOptions& bounds = {}, const RunOptions& options = {});

}  // namespace flashindexer
