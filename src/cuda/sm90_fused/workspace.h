// SPDX-License-Identifier: Apache-2.0
// The fused indexer's workspace layout, one struct per level: FusedShape (what the shapes decide:
// candidate slots, sampling, the bytes of one row's arrays) and RowArrays (the per-row arrays of
// one batch, carved from the slab of indexer/slab.h: the candidates and the sample over the
// logits, which the fallback reuses once they are dead, the others in the region the slab keeps).
// Host code.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "cuda/candidates/workspace.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/gate.h"
#include "cuda/sm90_scoring/config.h"

namespace flashindexer::cuda::fused {

using scoring::kTileKeys;

// What the shapes decide: the candidate slots, the sampling and the bytes of one row's arrays.
struct FusedShape {
  int64_t width = 0;  // keys a row can see
  int k = 0;
  int capacity = 0;
  bool gated = false;  // some row can hold more keys than its candidate slots
  int32_t tile_stride = 1;
  int32_t tile_shift = 0;
  int64_t sample_stride = 0;  // floats per row of the sample buffer

  // capacity: candidate slots per row (FusedConfig).
  FusedShape(int64_t width_, int k_, int capacity_) : width(width_), k(k_), capacity(capacity_) {
    gated = width > capacity;
    const int64_t tiles = (width + kTileKeys - 1) / kTileKeys;
    // One tile in 32 or more (<= kMaxSampleTiles of the widest row): the sample rank of a row's
    // k-th key is then q = k / tile_stride (16 at k = 512 up to 128K keys), and the sampled
    // tiles are not scored again by the scan.
    // A power of two, so that the scoring kernel walks the tiles without divisions.
    tile_shift = 5;
    while ((int64_t{1} << tile_shift) * kMaxSampleTiles < tiles) ++tile_shift;
    tile_stride = int32_t{1} << tile_shift;
    sample_stride = gated ? (tiles + tile_stride - 1) / tile_stride * kTileKeys : 0;
  }
  // A source layer's candidate blocks of block_size keys (0: none): each row's block entries,
  // block_pitch floats, and its block count.
  int block_size = 0;
  int64_t block_pitch = 0;
  void publish_blocks(int block_size_) {
    block_size = block_size_;
    block_pitch = candidates::pitch_floats((width + block_size - 1) / block_size);
  }
  // The per-row arrays: the candidates and the sample, which are dead once the select has run
  // and so lie over the fallback's logits, and four small ones (counts, gate, fallback ranges)
  // kept apart with the count of fallback rows, since the fallback reads them, and a source
  // layer's block entries and counts, which outlive the select. Each array is rounded up to 256
  // bytes.
  static constexpr size_t kKeptRowBytes = 4 * sizeof(int32_t);
  size_t kept_row_bytes() const {
    return kKeptRowBytes + (block_size > 0 ? static_cast<size_t>(block_pitch + 1) * 4 : 0);
  }
  size_t kept_bytes(int64_t rows) const {
    return static_cast<size_t>(rows) * kept_row_bytes() + (block_size > 0 ? 7 : 5) * 256;
  }
  size_t overlay_row_bytes() const {
    return static_cast<size_t>(capacity) * sizeof(uint64_t) +
           static_cast<size_t>(sample_stride) * sizeof(float);
  }
  size_t overlay_bytes(int64_t rows) const {
    return static_cast<size_t>(rows) * overlay_row_bytes() + 2 * 256;
  }
};

// The per-row arrays of one batch: the candidates and sample over the slab's logits, the others
// in the region the slab keeps.
struct RowArrays {
  int64_t rows = 0;  // rows per batch (a multiple of the row unit)
  uint64_t* candidates = nullptr;
  float* sample = nullptr;
  int32_t* counts = nullptr;
  float* gate = nullptr;
  int32_t* fallback_lo = nullptr;
  int32_t* fallback_hi = nullptr;
  int32_t* fallback_rows = nullptr;  // [1]
  float* block_entries = nullptr;    // [rows, block_pitch] (a source layer)
  int32_t* row_blocks = nullptr;     // [rows]
};

// Batches of equal rows (but the last), as few as the slab allows: each batch pays the tails of
// its sample, scan and select.
inline RowArrays carve_rows(const Slab& slab, const FusedShape& shape, int64_t rows,
                            int64_t row_unit) {
  RowArrays a;
  const auto most = static_cast<int64_t>(std::min(
                        (slab.kept_bytes - shape.kept_bytes(0)) / shape.kept_row_bytes(),
                        (slab.logits_bytes - shape.overlay_bytes(0)) / shape.overlay_row_bytes())) /
                    row_unit * row_unit;
  const int64_t batches = std::max<int64_t>((rows + most - 1) / most, 1);
  a.rows = std::max<int64_t>((rows + batches - 1) / batches, 1);
  a.rows = (a.rows + row_unit - 1) / row_unit * row_unit;
  auto carve = [](unsigned char* start) {
    return [next = start](size_t bytes) mutable {
      unsigned char* at = next;
      next += (bytes + 255) / 256 * 256;
      return at;
    };
  };
  const auto n = static_cast<size_t>(a.rows);
  auto overlay = carve(reinterpret_cast<unsigned char*>(slab.logits));
  a.candidates = reinterpret_cast<uint64_t*>(overlay(n * shape.capacity * sizeof(uint64_t)));
  a.sample = reinterpret_cast<float*>(overlay(n * shape.sample_stride * sizeof(float)));
  auto kept = carve(slab.kept);
  a.counts = reinterpret_cast<int32_t*>(kept(n * sizeof(int32_t)));
  a.gate = reinterpret_cast<float*>(kept(n * sizeof(float)));
  a.fallback_lo = reinterpret_cast<int32_t*>(kept(n * sizeof(int32_t)));
  a.fallback_hi = reinterpret_cast<int32_t*>(kept(n * sizeof(int32_t)));
  a.fallback_rows = reinterpret_cast<int32_t*>(kept(sizeof(int32_t)));
  if (shape.block_size > 0) {
    a.block_entries = reinterpret_cast<float*>(kept(n * shape.block_pitch * sizeof(float)));
    a.row_blocks = reinterpret_cast<int32_t*>(kept(n * sizeof(int32_t)));
  }
  return a;
}

}  // namespace flashindexer::cuda::fused
