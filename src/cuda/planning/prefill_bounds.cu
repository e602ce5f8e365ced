// SPDX-License-Identifier: Apache-2.0
// prefill_row_bounds_kernel: one prefill chunk's row bounds ks / ke and its token_to_seq (spec
// §6.3, localized per §9.1) from device-side lengths. Each value comes from
// planning/decode_rule.h, the rule the host planner's bounds follow, so valid lengths give the
// host op's bits exactly.
//
// Placing a request's rows and keys needs the exclusive prefix sums of the chunk's query and key
// counts. Every CTA computes them itself, walking the chunk's requests in tiles of kThreads (one
// request a thread, block_inclusive_scan, running totals across tiles), and keeps a tile's
// per-request offsets in shared memory; it then writes its own share of the rows and keys that
// fall in the tile, each finding its request by a binary search of those offsets. A chunk holds
// at most a few thousand requests, so the repeated scan costs each CTA a few loads a request,
// and no second launch or global scratch is needed for a cross-CTA scan. The CTAs split the rows
// (and token_to_seq's entries) evenly, so the stores of a long chunk spread over the GPU.
//
// Lengths the host cannot check without a sync are clamped (planning.h): S to [0, 2^31 - 1], M to
// [0, S]; rows past the lengths' queries get ks = ke = 0, token_to_seq entries past the chunk's
// keys get -1, and nothing at or past an output's end is written.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/warp_scan.cuh"
#include "cuda/planning/lengths.cuh"
#include "cuda/planning/planning.h"

namespace flashindexer::cuda {
namespace {

using planning_lengths::Lengths;
using planning_lengths::lengths_of;
using planning_lengths::load_length;

constexpr int kThreads = 512;  // requests per tile: 16 warps, so one warp scans the totals
constexpr int kWarps = kThreads / 32;
// A CTA's share: about this many rows (and twice as many token_to_seq entries), 16 (32) a thread.
constexpr int64_t kRowsPerBlock = 16 * kThreads;
constexpr int64_t kKeysPerBlock = 32 * kThreads;
constexpr int64_t kMaxBlocks = 1024;

struct BoundsParams {
  int32_t* ks;
  int32_t* ke;
  int64_t rows;           // the chunk's rows: group queries [query_begin, query_begin + rows)
  int32_t* token_to_seq;  // or nullptr
  int64_t token_entries;  // token_to_seq's size
  Lengths seq_lens;
  Lengths query_lens;
  int64_t request_begin;  // the chunk's requests [request_begin, request_end)
  int64_t request_end;
  int64_t query_begin;
  int64_t rows_per_block;  // each CTA's share of the rows and of token_to_seq's entries
  int64_t entries_per_block;
  planning::DecodeRule rule;
};

// The last j in [0, count) with offsets[j] <= value (offsets non-decreasing, offsets[0] <= value).
__device__ __forceinline__ int last_at_or_below(const int64_t* offsets, int count, int64_t value) {
  int lo = 0;
  int hi = count;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

__global__ void __launch_bounds__(kThreads)
    prefill_row_bounds_kernel(const __grid_constant__ BoundsParams p) {
  __shared__ int64_t warp_totals[kWarps];
  // The tile's requests: the group query of their first row, their first workspace key (cu[r]),
  // and the position of their first query, S_r - M_r.
  __shared__ int64_t first_query[kThreads];
  __shared__ int64_t first_key[kThreads];
  __shared__ int64_t first_position[kThreads];
  // This CTA's share, as group queries and workspace keys.
  const int64_t row_begin = blockIdx.x * p.rows_per_block;
  const int64_t row_end =
      row_begin + p.rows_per_block < p.rows ? row_begin + p.rows_per_block : p.rows;
  const int64_t query_lo = p.query_begin + row_begin;
  const int64_t query_hi = p.query_begin + row_end;
  const int64_t key_lo = blockIdx.x * p.entries_per_block;
  const int64_t key_hi = key_lo + p.entries_per_block < p.token_entries
                             ? key_lo + p.entries_per_block
                             : p.token_entries;
  int64_t queries_before = 0;  // the group queries and keys of the tiles before this one
  int64_t keys_before = 0;
  for (int64_t tile = p.request_begin; tile < p.request_end; tile += kThreads) {
    const int64_t r = tile + threadIdx.x;
    int64_t seq_len = 0;
    int64_t queries = 0;
    int64_t keys = 0;
    if (r < p.request_end) {
      seq_len = load_length(p.seq_lens, r);
      queries = load_length(p.query_lens, r);
      queries = queries < seq_len ? queries : seq_len;
      keys = planning::decode_token_keys(seq_len, p.rule);  // local_len(S_r / R)
    }
    int64_t tile_queries = 0;
    int64_t tile_keys = 0;
    const int64_t query_offset =
        queries_before + block_inclusive_scan<kThreads>(queries, warp_totals, tile_queries) -
        queries;
    __syncthreads();  // warp_totals is rewritten by the second scan
    const int64_t key_offset =
        keys_before + block_inclusive_scan<kThreads>(keys, warp_totals, tile_keys) - keys;
    first_query[threadIdx.x] = query_offset;
    first_key[threadIdx.x] = key_offset;
    first_position[threadIdx.x] = seq_len - queries;
    __syncthreads();
    const int count =
        p.request_end - tile < kThreads ? static_cast<int>(p.request_end - tile) : kThreads;
    // The tile's rows in this CTA's share: ks = cu[r], ke = cu[r] + n_vis(pos), localized.
    const int64_t tile_query_end = queries_before + tile_queries;
    const int64_t rows_from = query_lo > queries_before ? query_lo : queries_before;
    const int64_t rows_to = query_hi < tile_query_end ? query_hi : tile_query_end;
    for (int64_t g = rows_from + threadIdx.x; g < rows_to; g += kThreads) {
      const int j = last_at_or_below(first_query, count, g);
      const int64_t position = first_position[j] + (g - first_query[j]);
      const int64_t row = g - p.query_begin;
      p.ks[row] = static_cast<int32_t>(first_key[j]);
      p.ke[row] =
          static_cast<int32_t>(first_key[j] + planning::decode_token_keys(position + 1, p.rule));
    }
    // The tile's keys in this CTA's share of token_to_seq: the chunk-relative request.
    if (p.token_to_seq != nullptr) {
      const int64_t tile_key_end = keys_before + tile_keys;
      const int64_t keys_from = key_lo > keys_before ? key_lo : keys_before;
      const int64_t keys_to = key_hi < tile_key_end ? key_hi : tile_key_end;
      for (int64_t s = keys_from + threadIdx.x; s < keys_to; s += kThreads) {
        const int j = last_at_or_below(first_key, count, s);
        p.token_to_seq[s] = static_cast<int32_t>(tile - p.request_begin + j);
      }
    }
    queries_before = tile_query_end;
    keys_before += tile_keys;
    __syncthreads();  // the offsets and warp_totals are rewritten by the next tile
  }
  // Rows past the lengths' queries see no key; entries past the chunk's keys name no request.
  for (int64_t g = (query_lo > queries_before ? query_lo : queries_before) + threadIdx.x;
       g < query_hi; g += kThreads) {
    p.ks[g - p.query_begin] = 0;
    p.ke[g - p.query_begin] = 0;
  }
  if (p.token_to_seq != nullptr) {
    for (int64_t s = (key_lo > keys_before ? key_lo : keys_before) + threadIdx.x; s < key_hi;
         s += kThreads) {
      p.token_to_seq[s] = -1;
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Status prefill_row_bounds(const TensorView& ks, const TensorView& ke,
                          const TensorView& token_to_seq, const ChunkRows& chunk,
                          const TensorView& seq_lens, const TensorView& query_lens,
                          const planning::DecodeRule& rule, void* stream) {
  BoundsParams p{};
  p.ks = ks.ptr<int32_t>();
  p.ke = ke.ptr<int32_t>();
  p.rows = ks.shape[0];
  p.token_to_seq = token_to_seq.defined() ? token_to_seq.ptr<int32_t>() : nullptr;
  p.token_entries = token_to_seq.defined() ? token_to_seq.shape[0] : 0;
  p.seq_lens = lengths_of(seq_lens);
  p.query_lens = lengths_of(query_lens);
  p.request_begin = chunk.request_begin;
  p.request_end = chunk.request_end;
  p.query_begin = chunk.query_begin;
  p.rule = rule;
  int64_t blocks = ceil_div(p.rows, kRowsPerBlock);
  const int64_t key_blocks = ceil_div(p.token_entries, kKeysPerBlock);
  blocks = blocks > key_blocks ? blocks : key_blocks;
  if (blocks == 0) return Status::Ok();  // no row and no entry to write
  blocks = blocks < kMaxBlocks ? blocks : kMaxBlocks;
  p.rows_per_block = ceil_div(p.rows, blocks);
  p.entries_per_block = ceil_div(p.token_entries, blocks);
  prefill_row_bounds_kernel<<<static_cast<unsigned>(blocks), kThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("build_prefill_row_bounds");
}

}  // namespace flashindexer::cuda
