// What the host hands the FP8 scoring kernel (besides its tensor maps), and the kernel's fixed
// shape. Shared by the launch code (C++) and the kernel (CUDA).
#pragma once

#include <cstdint>

namespace flashindexer::cuda::scoring {

constexpr int kHeadDim = 128;       // D; one 128-byte swizzled row per key and per (row, head)
constexpr int kTileKeys = 64;       // keys per pipeline stage = wgmma M
constexpr int kConsumerGroups = 2;  // math warpgroups; they take alternate key tiles
constexpr int kThreads = 128 * (1 + kConsumerGroups);
constexpr int kMaxRowsPerGroup = 8;  // query rows sharing one Q tile (256 / H for H = 32)
// Candidate emission (the fused indexer) packs a key's row slot (< kMaxRowsPerGroup: 3 bits) and
// its index in the row into 32 bits of a queue entry, so a row's keys must lie below 2^29.
constexpr int64_t kMaxEmitKeys = int64_t{1} << 29;

// The Q-tile layout (score_kernel.cuh, TileColumn): with 4 or 8 query rows per tile (prefill at
// H = 32 and 64; decode next_n 4 at H = 64, 3-4 at H = 32) the tile is loaded permuted so that
// each lane holds every head of its own rows; with fewer rows, each row is spread over a quad of
// lanes. The host encodes the Q map to match (score_launch.cu).
template <int kHeads, int kColumns>
inline constexpr bool kLaneOwnedRows = (kColumns / kHeads) % 4 == 0;

// A group is `rows_per_group` consecutive query rows: a prefill q-block, or the next_n rows of one
// decode request. Prefill work items are (group, chunk): a group against the keys of one chunk
// of `chunk_keys`, run chunk-major, so the CTAs working at the same time read the same keys
// (from L2). Decode CTAs each take an equal share of all requests' key tiles (decode_share.cuh);
// there `chunk_keys` and `chunks` only size the grid (groups x chunks CTAs at most).
struct ScoreParams {
  int64_t rows = 0;    // query rows: M (prefill) or B * next_n (decode)
  int64_t groups = 0;  // ceil(M / rows_per_group) or B
  int rows_per_group = 0;
  int64_t chunk_keys = 0;  // multiple of kTileKeys
  int64_t chunks = 0;      // per group
  // Prefill, the fused indexer's fallback: the number of rows with a visible range (counted by
  // the fused select, an earlier launch). The kernel merges chunks so that few rows still spread
  // over the grid and many rows take one item per group (each item of an empty group costs a
  // range check); with none it has no work.
  const int32_t* live_rows = nullptr;
  int64_t width = 0;       // logits columns; visible ranges are clamped to it

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

  // Sampling (the fused indexer's gate): only key tiles t with t % tile_stride == 0 are scored,
  // and tile t's scores land in logits columns (t / tile_stride) * kTileKeys + 0..63. 1: every
  // tile, at its own columns. With skip_sampled, the other way round: every tile but those
  // (whose keys the gate has already handled); only with tile_stride >= 32 (TileWalk::advance).
  int32_t tile_stride = 1;  // a power of two
  int32_t tile_shift = 0;   // log2(tile_stride)
  bool skip_sampled = false;

  // Candidate emission (the fused indexer's scan), when gate != nullptr: no logits are written;
  // a visible key whose score is >= gate[row] (every key, NaN scores too, when gate[row] is NaN)
  // is appended to row's slots candidates[row * candidate_capacity, ...) as a rank key (score
  // key << 32 | ~(key - lo)), counted in candidate_counts[row], which keeps counting past the
  // capacity (overflow). Keys lie below 2^29 (kMaxEmitKeys) of their row's lo.
  const float* gate = nullptr;
  uint64_t* candidates = nullptr;
  int32_t* candidate_counts = nullptr;
  int32_t candidate_capacity = 0;
};

}  // namespace flashindexer::cuda::scoring
