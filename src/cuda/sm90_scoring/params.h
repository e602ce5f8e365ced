// SPDX-License-Identifier: Apache-2.0
// What the host hands the FP8 scoring kernel: its four tensor maps, the rows, keys and output
// with which key tiles it walks (ScoreParams and its TileFilter). Shared by the launch code (C++)
// and the kernel (CUDA). An epilogue brings its own parameters (typename Epilogue::Params), which
// follow ScoreParams in the kernel's parameter block (kernel.cuh, KernelParams).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <cstdint>

#include "cuda/sm90_scoring/config.h"

namespace flashindexer::cuda::scoring {

// Which key tiles of a work item the kernel walks (schedule.cuh, TileWalk). The default walks
// every tile, as mqa_logits / paged_mqa_logits do; the fused indexer samples and scans with it.
struct TileFilter {
  // Sampling: only key tiles t with t % tile_stride == 0 are scored, and tile t's scores land in
  // logits columns (t / tile_stride) * kTileKeys + 0..63. 1: every tile, at its own columns. With
  // skip_sampled, the other way round: every tile but those; only with tile_stride >= 32
  // (TileWalk::advance).
  int32_t tile_stride = 1;  // a power of two
  int32_t tile_shift = 0;   // log2(tile_stride)
  bool skip_sampled = false;
};

// A group is `rows_per_group` consecutive query rows: a prefill q-block, or the next_n rows of one
// decode request. Prefill work items are (group, chunk): a group against the keys of one chunk
// of `chunk_keys`, run chunk-major, so the CTAs working at the same time read the same keys
// (from L2). Decode CTAs each take an equal share of all requests' key tiles (schedule.cuh);
// there `chunk_keys` and `chunks` only size the grid (groups x chunks CTAs at most).
//
// The members' order is the kernel parameter block's, kept as the scoring kernel was measured
// with: live_rows after chunks, the filter last (at byte 168), so that an epilogue's parameters
// follow at byte 184. With the filter a kernel parameter of its own, ptxas scheduled and
// allocated every instantiation differently (it hoisted the skip_sampled load to the consumers'
// start, for one).
struct ScoreParams {
  int64_t rows = 0;    // query rows: M (prefill) or B * next_n (decode)
  int64_t groups = 0;  // ceil(M / rows_per_group) or B
  int rows_per_group = 0;
  int64_t chunk_keys = 0;  // multiple of kTileKeys
  int64_t chunks = 0;      // per group
  // Prefill, the fused indexer's fallback: the number of rows with a visible range (counted by
  // an earlier launch). The kernel merges chunks so that few rows still spread over the grid and
  // many rows take one item per group (each item of an empty group costs a range check); with
  // none it has no work. nullptr: the planned chunks.
  const int32_t* live_rows = nullptr;
  int64_t width = 0;  // logits columns; visible ranges are clamped to it
  // Prefill: row t sees keys [ks[t], ke[t]) of num_keys.
  const int32_t* ks = nullptr;
  const int32_t* ke = nullptr;
  int64_t num_keys = 0;
  // Decode: row b * next_n + j sees positions [0, len(b, j)); with 2-D lengths len is
  // context_lens[b, j], with 1-D lengths context_lens[b] - next_n + j + 1.
  const int32_t* context_lens = nullptr;
  int64_t lens_stride_b = 0;
  int64_t lens_stride_j = 0;  // 0 for 1-D lengths
  bool lens_2d = false;
  const int32_t* block_table = nullptr;
  int64_t table_stride_b = 0;
  int64_t table_stride_p = 0;
  int64_t table_pages = 0;  // P
  int page_size = 64;
  int page_shift = 6;  // log2(page_size): page sizes are powers of two
  float* logits = nullptr;
  int64_t logits_stride = 0;
  TileFilter filter;  // every tile (the fused indexer narrows it)
};
static_assert(offsetof(ScoreParams, live_rows) == 40 && offsetof(ScoreParams, filter) == 168 &&
                  sizeof(ScoreParams) == 184,
              "the scoring kernel's parameter layout (see above)");

// What the FP8 sparse kernels take beyond ScoreParams (their KernelParams' third member,
// format_sparse.cuh): the keys' addresses, which their producer lanes gather with plain
// asynchronous copies. Packed: key row i < num_keys at keys + i key_stride, its scale at
// scales[i]. Paged: page p at keys + p page_stride, its page_size rows of 128 bytes, then their
// fp32 scales.
struct SparseKeyAddresses {
  const uint8_t* keys = nullptr;
  const float* scales = nullptr;  // packed only
  int64_t key_stride = 0;         // packed: bytes between key rows
  int64_t num_keys = 0;           // packed: rows of keys
  int64_t page_stride = 0;        // paged: bytes between pages
  int page_size = 0;              // paged: keys a page
};

// What the MXFP4 kernels take beyond ScoreParams (their KernelParams' third member,
// format_mxfp4.cuh): the query scales, read by a converting producer warp with plain loads (a fifth
// tensor map would change every kernel's signature). The four scales of one (row, head) are
// contiguous and heads are 4 bytes apart; the row stride is in bytes.
struct Mxfp4Params {
  const uint8_t* q_scales = nullptr;  // [rows, H, 4] UE8M0
  int64_t q_scale_row_stride = 0;
  // Set to 1 by a converting lane that flags an out-of-span vector, never reset: the device's
  // sticky flag (mxfp4_fixup.cu), which lets the fix-up skip its scan until a call has flagged.
  int* out_of_span = nullptr;
};

// The raw MXFP4 operands of a call, for the exact fix-up of out-of-span logits (mxfp4_fixup.cu).
// Strides in bytes (weights: floats); the four scales of a vector are contiguous.
struct Mxfp4Fixup {
  const int* out_of_span = nullptr;  // Mxfp4Params::out_of_span
  int heads = 0;
  const uint8_t* q_values = nullptr;  // [rows, H, 64] packed E2M1
  int64_t q_row_stride = 0;
  int64_t q_head_stride = 0;
  const uint8_t* q_scales = nullptr;  // [rows, H, 4], heads 4 bytes apart
  int64_t q_scale_row_stride = 0;
  const float* weights = nullptr;  // [rows, H] f32, heads contiguous
  int64_t weights_row_stride = 0;
  const uint8_t* k_values = nullptr;  // packed keys [N, 64]
  int64_t k_row_stride = 0;
  const uint8_t* k_scales = nullptr;  // [N, 4]
  int64_t k_scale_row_stride = 0;
  const uint8_t* cache = nullptr;  // paged: page p at cache + p page_stride, values then scales
  int64_t page_stride = 0;
  int cache_page_size = 0;  // keys a page (a sparse call's ScoreParams::page_size is its block)
  // A sparse call (format_sparse.cuh): key j * sparse_block + o of row r is key o of the block
  // entry ScoreParams::block_table[r * table_stride_b + j] names (a packed key row, or
  // page << kSparseRowBits | row of `cache`). 0: a dense call.
  int sparse_block = 0;
};

// The four TMA descriptors of one launch (see kernel.cuh for their shapes).
struct ScoreMaps {
  CUtensorMap q;       // e4m3 [T, H, 128], box [rows_per_group, H, 128], 128B swizzle
  CUtensorMap w;       // f32 [T, H], box [rows_per_group, H]
  CUtensorMap keys;    // e4m3 [N, 128] box [64, 128] (prefill) or [pages, page, 128] (paged)
  CUtensorMap scales;  // f32 [N] box [64] (prefill) or [pages, page] (paged)
};

}  // namespace flashindexer::cuda::scoring
