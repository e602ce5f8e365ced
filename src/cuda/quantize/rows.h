// SPDX-License-Identifier: Apache-2.0
// One kernel per format quantizes rows of D values wherever they come from and go: a [N, D]
// or [T, H, D] view into a view (quantize_k_fp8, quantize_mxfp4, the query quantizers) or keys
// into their slots of the paged cache (insert_k_cache), with RoPE before and the query weights
// folded after when asked. A job says which; the kernels are in rows_fp8.cu and rows_mxfp4.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/quantize/lanes.cuh"
#include "cuda/quantize/rope_lanes.cuh"
#include "flashindexer/status.h"

namespace flashindexer::cuda::quant {

// Where row r's codes and scales go.
struct Destination {
  // A view: values row r at values + value_rows.offset(r) (bytes); its scale(s) at
  // scales + scale_rows.offset(r) (f32 elements for FP8, bytes for MXFP4).
  uint8_t* values = nullptr;
  Rows value_rows;
  void* scales = nullptr;
  Rows scale_rows;
  // Or the paged cache (slots != nullptr): row r into slot slots[r]; slots < 0 or at or past
  // num_slots are skipped.
  const void* slots = nullptr;
  bool slots_i64 = false;
  uint8_t* cache = nullptr;
  int64_t page_stride = 0;
  int page_size = 0;
  int64_t scales_in_page = 0;  // where a page's scales start: page_size * value bytes a key
  int64_t num_slots = 0;
  // slot -> page: in 32 bits when every slot is below 2^31, else in 64.
  bool slots_fit_32 = false;
  FastDivisor by_page_size;
  FastDivisor64 by_page_size_64;
};

// The query weights: weights_out[r] = weights[r] * (sigma_r for FP8) * weight_scale.
struct WeightFold {
  const void* weights = nullptr;  // null: no weights
  bool weights_bf16 = false;
  Rows weight_rows;
  float* weights_out = nullptr;
  Rows weights_out_rows;
  float weight_scale = 1.0f;
};

struct RowJob {
  const void* input = nullptr;
  bool input_bf16 = false;
  Rows input_rows;
  int64_t rows = 0;
  int head_dim = 0;
  int64_t rows_per_token = 1;  // RoPE position of row r: positions[r / rows_per_token]
  // Set by launch_rows: every view's inner dimension (1, or H of a [T, H, D] job; rows_per_token
  // is 1 or H too), and the divisor that splits a row into (outer, inner) once for all views.
  uint32_t row_inner = 1;
  FastDivisor by_row_inner;
  float floor = 1e-4f;  // FP8: the amax floor
  bool vector = false;  // every row and destination allows the lanes' vector accesses
  Rope rope;
  Destination destination;
  WeightFold weights;
};

// Head dims the kernels take: D/16 lanes per row, a power of two up to half a warp.
inline bool head_dim_supported(int64_t head_dim) {
  return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

// Each group of D/16 lanes quantizes two rows, their loads issued together: twice the bytes in
// flight per thread of a single row, at an occupancy the registers still allow (a memory-bound
// kernel needs both), and the group's lanes split the rows' scales between them
// (fp8_group_scales, mxfp4_block_bytes). The RoPE kernels too: a lane rotates eight values of a
// row (lanes.cuh), so its partner chunk and cos/sin entries fit beside the two rows.
constexpr int kRowsPerGroup = 2;
static_assert(kRowsPerGroup == 2, "fp8_group_scales and mxfp4_block_bytes take a pair of rows");
// Registers: at most 64 a thread (4 blocks of 256 threads per SM), each thread with 64 bytes of
// bf16 loads in flight (128 of f32). The RoPE kernels wait for two loads in a row (the position,
// then its cos / sin entries), so they need the warps: aligned bf16 rows at D >= 128 hold their
// values as words (rows_fp8.cu, rows_mxfp4.cu) and their destinations as keys (RowKey), and fit
// 64 too (at 80 registers and 3 blocks the FP8 query + RoPE ran 0.1521 ms against 0.1365 at 64
// and 4, MXFP4 0.1666 against 0.1524, on the H200). The other RoPE
// kernels take up to 80 (3 blocks), and with f32 input, MXFP4 codes at D = 64 (both slots
// rotate), or element-wise (unaligned) loads, which hold the cos / sin entries besides their
// loads, up to 128 (2 blocks): tighter bounds spilled. The plain MXFP4 kernel on aligned bf16 rows
// fits 48 (5 blocks): its words hold the values in half the registers, and the extra warps took
// the 1M-key insert from 0.1210 to 0.1155 ms on the H200 (FP8's at 48 spilled).
template <typename In, int kLanes, bool kVector>
constexpr int min_blocks_per_sm(bool rope, bool mxfp4) {
  if (!rope && mxfp4 && kVector && sizeof(In) == 2 && kLanes >= 8) return 5;
  if (!rope || (kVector && sizeof(In) == 2 && kLanes >= 8)) return 4;
  return sizeof(In) == 4 || !kVector || (mxfp4 && kLanes == 4) ? 2 : 3;
}

// A row of a launch (below 2^31) and its (outer, inner) split.
struct RowIndex {
  uint32_t row;
  uint32_t outer;
  uint32_t inner;
};

__device__ __forceinline__ RowIndex row_index(const RowJob& job, uint32_t row) {
  const uint32_t outer = job.by_row_inner.quotient(row);
  return {row, outer, row - outer * job.row_inner};
}

// The RoPE position's index: the token, row / rows_per_token (rows_per_token is 1 or the
// inner dimension).
__device__ __forceinline__ uint32_t token_of(const RowJob& job, const RowIndex& at) {
  return job.rows_per_token == 1 ? at.row : at.outer;
}

struct RowAddresses {
  uint8_t* values = nullptr;
  uint8_t* scales = nullptr;  // FP8: the cache's 4 scale bytes or the scales view's f32
};

// The addresses of cache slot `slot`'s codes and scales. value_bytes / scale_bytes: per key in a
// cache page (FP8 D and 4, MXFP4 D/2 and D/32). Slots split into pages with a 32-bit
// FastDivisor, or a 64-bit one for a cache of more than 2^31 slots.
__device__ __forceinline__ RowAddresses slot_addresses(const Destination& to, uint64_t slot,
                                                       int value_bytes, int scale_bytes) {
  uint8_t* page;
  uint64_t in_page;
  if (to.slots_fit_32) {  // the same branch for the whole launch
    const auto slot32 = static_cast<uint32_t>(slot);
    const uint32_t page_index = to.by_page_size.quotient(slot32);
    in_page = slot32 - page_index * static_cast<uint32_t>(to.page_size);
    page = to.cache + static_cast<int64_t>(page_index) * to.page_stride;
  } else {
    const uint64_t page_index = to.by_page_size_64.quotient(slot);
    in_page = slot - page_index * static_cast<uint64_t>(to.page_size);
    page = to.cache + static_cast<int64_t>(page_index) * to.page_stride;
  }
  RowAddresses out;
  out.values = page + in_page * static_cast<uint32_t>(value_bytes);
  out.scales = page + to.scales_in_page + in_page * static_cast<uint32_t>(scale_bytes);
  return out;
}

// The addresses of view row (outer, inner); scale_element: bytes of one element of the scales
// view.
__device__ __forceinline__ RowAddresses view_addresses(const Destination& to, uint32_t outer,
                                                       uint32_t inner, int scale_element) {
  RowAddresses out;
  out.values = to.values + to.value_rows.at(outer, inner);
  if (to.scales != nullptr) {
    out.scales = static_cast<uint8_t*>(to.scales) + to.scale_rows.at(outer, inner) * scale_element;
  }
  return out;
}

// Row `at`'s cache slot as the mapping holds it (0 for a view destination). The kernels read every
// row's slot before they test any (slot_written): tested as it was loaded, each slot held back the
// loads after it, and an insert waited for two slot loads in a row before its last values were
// requested (H200, bf16 keys: FP8 1M keys 0.1224 -> 0.1123 ms, MXFP4 64K 0.0132 -> 0.0124).
__device__ __forceinline__ int64_t load_slot(const RowJob& job, const RowIndex& at) {
  const Destination& to = job.destination;
  if (to.slots == nullptr) return 0;
  return to.slots_i64 ? __ldg(static_cast<const int64_t*>(to.slots) + at.row)
                      : __ldg(static_cast<const int32_t*>(to.slots) + at.row);
}

// Whether a loaded slot is written (a slot < 0 or past the cache is not).
__device__ __forceinline__ bool slot_written(const Destination& to, int64_t slot) {
  return slot >= 0 && slot < to.num_slots;
}

// Where one row's codes go and whether it is written at all (a row past the end, in_range
// false, or a skipped slot, is not), from its loaded slot (load_slot), in one of two forms.
// RowTarget, the kernels without RoPE: the addresses themselves. RowKey, the RoPE kernels: one pair
// of words until the stores (row_addresses), the row's (outer, inner) split for a view or its slot
// for the cache, so that the destination and the row's split do not both stay live through the
// rotation and the quantization (at 64 registers they spilled an address held from the start).
// Without RoPE the registers are there, and the addresses computed at the stores ran 1-2 % slower
// on the H200.
struct RowTarget {
  bool live = false;
  uint8_t* values = nullptr;
  uint8_t* scales = nullptr;  // FP8: the cache's 4 scale bytes or the scales view's f32
};
struct RowKey {
  bool live = false;
  uint32_t key[2] = {0, 0};  // a view: outer, inner; the cache: the slot's low and high words
};

// scale_element: bytes of one element of the scales view.
__device__ __forceinline__ RowTarget row_target(const RowJob& job, const RowIndex& at,
                                                bool in_range, int64_t slot, int value_bytes,
                                                int scale_bytes, int scale_element) {
  RowTarget target;
  if (!in_range) return target;
  const Destination& to = job.destination;
  RowAddresses addresses;
  if (to.slots != nullptr) {
    if (!slot_written(to, slot)) return target;
    addresses = slot_addresses(to, static_cast<uint64_t>(slot), value_bytes, scale_bytes);
  } else {
    addresses = view_addresses(to, at.outer, at.inner, scale_element);
  }
  target.values = addresses.values;
  target.scales = addresses.scales;
  target.live = true;
  return target;
}

__device__ __forceinline__ RowKey row_key(const RowJob& job, const RowIndex& at, bool in_range,
                                          int64_t slot) {
  RowKey target;
  if (!in_range) return target;
  if (job.destination.slots != nullptr) {
    if (!slot_written(job.destination, slot)) return target;
    target.key[0] = static_cast<uint32_t>(slot);
    target.key[1] = static_cast<uint32_t>(static_cast<uint64_t>(slot) >> 32);
  } else {
    target.key[0] = at.outer;
    target.key[1] = at.inner;
  }
  target.live = true;
  return target;
}

// The addresses of a live row_key.
__device__ __forceinline__ RowAddresses row_addresses(const RowJob& job, const RowKey& target,
                                                      int value_bytes, int scale_bytes,
                                                      int scale_element) {
  const Destination& to = job.destination;
  RowAddresses out;
  if (to.slots != nullptr) {
    const uint64_t slot = target.key[0] | static_cast<uint64_t>(target.key[1]) << 32;
    out = slot_addresses(to, slot, value_bytes, scale_bytes);
  } else {
    // Written out, not view_addresses: through that helper these kernels compiled to other
    // instructions than the form measured on the H200 (rows_fp8.cu, rows_mxfp4.cu).
    out.values = to.values + to.value_rows.at(target.key[0], target.key[1]);
    if (to.scales != nullptr) {
      out.scales = static_cast<uint8_t*>(to.scales) +
                   to.scale_rows.at(target.key[0], target.key[1]) * scale_element;
    }
  }
  return out;
}
__device__ __forceinline__ RowAddresses row_addresses(const RowJob&, const RowTarget& target, int,
                                                      int, int) {
  return {target.values, target.scales};
}

// The (outer, inner) split of a live view row, from either form.
__device__ __forceinline__ RowIndex view_row(const RowIndex& at, const RowTarget&) { return at; }
__device__ __forceinline__ RowIndex view_row(const RowIndex&, const RowKey& target) {
  return {0, target.key[0], target.key[1]};
}

// One row's values into a lane's bf16 words (aligned bf16 rows) or floats (lanes.cuh).
template <typename In, int kLanes, bool kVector, typename Values>
__device__ __forceinline__ void load_row_values(Values& x, const RowJob& job, const RowIndex& at,
                                                int lane) {
  const In* input = static_cast<const In*>(job.input) + job.input_rows.at(at.outer, at.inner);
  if constexpr (std::is_same_v<Values, uint32_t[kLaneValues / 2]>) {
    load_lane_bf16_words<kLanes>(x, input, lane);
  } else {
    load_lane<In, kVector, kLanes>(x, input, lane);
  }
}

// A group's rows from `first_row` (fewer than `row_count` are real): their splits, loads and
// targets (RowKey, or RowTarget with the destination's value_bytes, scale_bytes and
// scale_element); load_values(u) issues row u's value loads. Every row's slot is loaded before
// any row's target is decided (load_slot). The kernels without RoPE (RowTarget) load every row's
// values first too; the RoPE kernels load a row's values once its target is decided, as they did
// before the slots moved (the FP8 query + RoPE ran 0.1404 ms with its values loaded first, 0.1323
// this way, on the H200). A row past the end reads the last row (no branch around the loads, no
// zeros to set) and writes nothing; so do rows whose slot is skipped.
template <int kRows, typename Target, typename LoadValues>
__device__ __forceinline__ void begin_rows(const RowJob& job, uint32_t first_row,
                                           uint32_t row_count, int value_bytes, int scale_bytes,
                                           int scale_element, RowIndex (&at)[kRows],
                                           Target (&target)[kRows], LoadValues&& load_values) {
  constexpr bool kKeys = std::is_same_v<Target, RowKey>;
  int64_t slot[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const uint32_t row = first_row + u;
    at[u] = row_index(job, row < row_count ? row : row_count - 1);
    slot[u] = load_slot(job, at[u]);
    if constexpr (!kKeys) load_values(u);
  }
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const bool in_range = first_row + u < row_count;
    if constexpr (kKeys) {
      target[u] = row_key(job, at[u], in_range, slot[u]);
      load_values(u);
    } else {
      target[u] =
          row_target(job, at[u], in_range, slot[u], value_bytes, scale_bytes, scale_element);
    }
  }
}

// RoPE on a group's rows (each a lane's floats or bf16 words, apply_rope): the position and
// cos / sin entries loaded once for consecutive rows of one token (a query's heads), again only
// where the token (or the row's liveness) changes.
template <int kLanes, RopeStyle kStyle, int kRows, typename Values, typename Target>
__device__ __forceinline__ void apply_rope_rows(Values (&x)[kRows], const RowJob& job,
                                                const RowIndex (&at)[kRows],
                                                const Target (&target)[kRows], int lane,
                                                unsigned mask) {
  // Which rows load entries, decided before any rotation: only a row's token and that bit stay
  // live through the rotations before it (registers the RoPE kernels are short of).
  uint32_t token[kRows];
  bool load[kRows];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    token[u] = token_of(job, at[u]);
    load[u] = u == 0 || token[u] != token[u - 1] || target[u].live != target[u - 1].live;
  }
  RopeEntries entries;
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    if (load[u]) {
      load_rope_entries<kLanes, kStyle>(entries, job.rope, token[u], target[u].live, lane);
    }
    apply_rope<kLanes, kStyle>(x[u], job.rope, entries, lane, mask);
  }
}

// The weight of view row `at` (lane 0 of its group writes it; jobs with weights write views):
// (w * sigma) * weight_scale in the FP8 form, w * weight_scale in the MXFP4 form (sigma null).
__device__ __forceinline__ void fold_weight(const WeightFold& fold, const RowIndex& at,
                                            const float* sigma) {
  if (fold.weights == nullptr) return;
  const int64_t in = fold.weight_rows.at(at.outer, at.inner);
  float w = fold.weights_bf16 ? load_float(static_cast<const Bf16Bits*>(fold.weights) + in)
                              : load_float(static_cast<const float*>(fold.weights) + in);
  if (sigma != nullptr) w = __fmul_rn(w, *sigma);
  fold.weights_out[fold.weights_out_rows.at(at.outer, at.inner)] = __fmul_rn(w, fold.weight_scale);
}

Status launch_fp8_rows(const RowJob& job, cudaStream_t stream, const char* op);
Status launch_mxfp4_rows(const RowJob& job, cudaStream_t stream, const char* op);

}  // namespace flashindexer::cuda::quant
