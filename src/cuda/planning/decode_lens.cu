// SPDX-License-Identifier: Apache-2.0
// decode_flat_lens_kernel / decode_native_lens_kernel: the decode per-token key lengths of spec
// §7.1 (localized per §9.1) from device-side lengths, for decode steps captured in CUDA graphs.
// Each value comes from planning/decode_rule.h, the code the host planner runs, so valid lengths
// give its bits exactly.
//
// Flattened layout: rows [requests' tokens in order, then padding]. Placing request b's d_b rows
// needs the exclusive prefix sum of the token counts, so one CTA walks the requests in tiles of
// kFlatThreads, one request per thread: a block-wide scan of the tile's counts (warp scans, then
// a scan of the warp totals) gives each thread its first row, a running total carries across
// tiles (block_inclusive_scan), and the same CTA then writes the padding rows. Decode batches have
// at most a few thousand requests, so a single CTA (a few tiles) costs a few microseconds and needs
// no second launch or global scratch for a cross-CTA scan.
//
// Native layout [requests, next_n]: one thread per entry, grid-stride; no scan.
//
// Lengths the host cannot check without a sync are clamped (planning.h): L to [0, 2^31 - 1], d to
// [0, min(next_n, L)]; rows at or past `rows` are never written.
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/warp_scan.cuh"
#include "cuda/planning/lengths.cuh"
#include "cuda/planning/planning.h"

namespace flashindexer::cuda {
namespace {

constexpr int kFlatThreads = 512;  // requests per tile: 16 warps, so one warp scans the totals
constexpr int kWarps = kFlatThreads / 32;
constexpr int kNativeThreads = 256;
// Enough CTAs for any current GPU; larger batches loop (grid-stride).
constexpr int64_t kMaxNativeBlocks = 4096;
using planning_lengths::Lengths;
using planning_lengths::lengths_of;
using planning_lengths::load_length;

struct FlatParams {
  int32_t* row_lens;
  int32_t* row_to_request;  // or nullptr
  int64_t rows;
  Lengths seq_lens;
  Lengths query_lens;
  int64_t requests;
  int next_n;
  planning::DecodeRule rule;
};

__global__ void __launch_bounds__(kFlatThreads)
    decode_flat_lens_kernel(const __grid_constant__ FlatParams p) {
  __shared__ int64_t warp_totals[kWarps];
  int64_t tile_start_row = 0;  // rows taken by the tiles before this one
  for (int64_t tile = 0; tile < p.requests; tile += kFlatThreads) {
    const int64_t b = tile + threadIdx.x;
    int64_t seq_len = 0;
    int64_t tokens = 0;
    if (b < p.requests) {
      seq_len = load_length(p.seq_lens, b);
      tokens = load_length(p.query_lens, b);
      const int64_t most = seq_len < p.next_n ? seq_len : p.next_n;
      tokens = tokens < most ? tokens : most;
    }
    int64_t tile_tokens = 0;
    const int64_t first_row = tile_start_row +
                              block_inclusive_scan<kFlatThreads>(tokens, warp_totals, tile_tokens) -
                              tokens;
    const int64_t past = seq_len - tokens;
    for (int64_t i = 0; i < tokens; ++i) {
      const int64_t row = first_row + i;
      if (row >= p.rows) break;
      p.row_lens[row] = planning::decode_token_keys(past + i + 1, p.rule);
      if (p.row_to_request != nullptr) p.row_to_request[row] = static_cast<int32_t>(b);
    }
    tile_start_row += tile_tokens;
    __syncthreads();  // warp_totals is rewritten by the next tile
  }
  // Padding rows [tokens, rows): length 0, ids requests + k.
  for (int64_t row = tile_start_row + threadIdx.x; row < p.rows; row += kFlatThreads) {
    p.row_lens[row] = 0;
    if (p.row_to_request != nullptr) {
      p.row_to_request[row] = static_cast<int32_t>(p.requests + (row - tile_start_row));
    }
  }
}

struct NativeParams {
  int32_t* lens;
  int64_t lens_stride;
  Lengths seq_lens;
  int64_t requests;
  int next_n;
  planning::DecodeRule rule;
};

__global__ void __launch_bounds__(kNativeThreads)
    decode_native_lens_kernel(const __grid_constant__ NativeParams p) {
  const int64_t total = p.requests * p.next_n;
  for (int64_t e = blockIdx.x * int64_t{kNativeThreads} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * kNativeThreads) {
    const int64_t b = e / p.next_n;
    const int j = static_cast<int>(e - b * p.next_n);
    p.lens[b * p.lens_stride + j] =
        planning::native_token_keys(load_length(p.seq_lens, b), p.next_n, j, p.rule);
  }
}

}  // namespace

Status decode_flat_lens(const TensorView& row_lens, const TensorView& row_to_request,
                        const TensorView& seq_lens, const TensorView& query_lens, int next_n,
                        const planning::DecodeRule& rule, void* stream) {
  FlatParams p{};
  p.row_lens = row_lens.ptr<int32_t>();
  p.row_to_request = row_to_request.defined() ? row_to_request.ptr<int32_t>() : nullptr;
  p.rows = row_lens.shape[0];
  p.seq_lens = lengths_of(seq_lens);
  p.query_lens = lengths_of(query_lens);
  p.requests = seq_lens.shape[0];
  p.next_n = next_n;
  p.rule = rule;
  if (p.rows == 0) return Status::Ok();
  decode_flat_lens_kernel<<<1, kFlatThreads, 0, static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("decode_flat_lens");
}

Status decode_native_lens(const TensorView& lens, const TensorView& seq_lens, int next_n,
                          const planning::DecodeRule& rule, void* stream) {
  NativeParams p{};
  p.lens = lens.ptr<int32_t>();
  p.lens_stride = lens.stride[0];
  p.seq_lens = lengths_of(seq_lens);
  p.requests = seq_lens.shape[0];
  p.next_n = next_n;
  p.rule = rule;
  const int64_t total = p.requests * next_n;
  if (total == 0) return Status::Ok();
  int64_t blocks = (total + kNativeThreads - 1) / kNativeThreads;
  blocks = blocks < kMaxNativeBlocks ? blocks : kMaxNativeBlocks;
  decode_native_lens_kernel<<<static_cast<unsigned>(blocks), kNativeThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(p);
  return launch_status("decode_native_lens");
}

}  // namespace flashindexer::cuda
