// SPDX-License-Identifier: Apache-2.0
// The paged indexer K cache (spec §4) and the packed prefill workspace.
//
// A page holds `page_size` keys. FP8 page: all keys' D value bytes, then their fp32 scales
// (D + 4 bytes per key, not interleaved). MXFP4 page: all keys' D/2 packed value bytes, then
// their D/32 UE8M0 scale bytes. Pages start every `page_stride_bytes` bytes, which may exceed
// the bytes a page needs (padding, pooled allocations). Key `slot` lives in page
// `slot / page_size`, row `slot % page_size`.
#pragma once

#include <cstdint>

#include "flashindexer/rope.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer {

enum class KFormat : uint8_t {
  kFP8,    // e4m3 values + one fp32 power-of-two scale per key
  kMXFP4,  // packed E2M1 values + one UE8M0 byte per 32 values
};

const char* kformat_name(KFormat format);

struct PagedKCache {
  void* data = nullptr;  // base of page 0
  Device device = Device::kCPU;
  KFormat format = KFormat::kFP8;
  int64_t num_pages = 0;
  int page_size = 64;             // keys per page
  int head_dim = 128;             // D
  int64_t page_stride_bytes = 0;  // >= page_bytes(format, page_size, head_dim), multiple of 4

  // Bytes one key occupies in a page: D + 4 (FP8) or D/2 + D/32 (MXFP4).
  static int64_t bytes_per_key(KFormat format, int head_dim);
  // Bytes a page needs: page_size * bytes_per_key.
  static int64_t page_bytes(KFormat format, int page_size, int head_dim);
  int64_t value_bytes_per_key() const;  // D or D/2
  int64_t scale_bytes_per_key() const;  // 4 or D/32
};

// Quantizes `keys` (spec §3.2 / §3.3 by the cache format) and writes key i into slot
// slot_mapping[i]; slots < 0 are skipped. Rows of `keys` beyond slot_mapping's length are
// ignored (CUDA-graph padding). A slot at or past num_pages * page_size is an error on CPU
// tensors; on CUDA tensors (where reading the mapping would need a host synchronisation) the
// kernel skips it, so nothing is written out of the cache.
// keys: [N', D] f32 or bf16 with N' >= N; slot_mapping: [N] i64 or i32.
Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const RunOptions& options = {});

struct KeyInsertOptions {
  // RoPE on each key before its quantization (rope.h): positions has at least N entries, row i
  // of keys rotates at positions[i], read only for rows whose slot is >= 0.
  RopeOptions rope;
};

// The same, with the key's RoPE fused in.
Status insert_k_cache(const PagedKCache& cache, const TensorView& keys,
                      const TensorView& slot_mapping, const KeyInsertOptions& insert,
                      const RunOptions& options = {});

// Copies each request's keys into the packed prefill workspace (spec §4.6):
//   for request r and j < cu_seq_lens[r+1] - cu_seq_lens[r]:
//     ws[cu_seq_lens[r] + j] = cache key at page block_table[r, j / page_size], row j % page_size.
// values: [Nws, D] e4m3 or [Nws, D/2] e2m1x2 (out); scales: [Nws] f32 or [Nws, D/32] ue8m0 (out);
// block_table: [R, P] i32; cu_seq_lens: [R + 1] i32, nondecreasing, cu_seq_lens[R] <= Nws.
// On CPU tensors the offsets and the pages a request needs are checked (an error names them). On
// CUDA tensors they live on the device and are not read by the host: a workspace key whose offsets
// are out of order, whose page index is past the table's width or whose page id is outside
// [0, num_pages) is left unwritten, and so are keys at or past Nws; nothing is read or written out
// of bounds.
Status gather_k_workspace(const TensorView& values, const TensorView& scales,
                          const PagedKCache& cache, const TensorView& block_table,
                          const TensorView& cu_seq_lens, const RunOptions& options = {});

}  // namespace flashindexer
