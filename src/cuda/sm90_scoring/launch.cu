// SPDX-License-Identifier: Apache-2.0
// Host side of the FP8 and MXFP4 scoring kernels: CUDA-specific argument checks (what TMA needs),
// the tensor maps (tensor_maps.h), the work plan (from shapes only: no host synchronisation,
// graph-capturable) and the launch; then the clean fill when asked.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/cuda_ops.h"
#include "cuda/sm90_scoring/call.h"
#include "cuda/sm90_scoring/format_sparse.cuh"
#include "cuda/sm90_scoring/sparse_call.h"
#include "cuda/sm90_scoring/store_epilogue.cuh"
#include "cuda/sm90_scoring/tensor_maps.h"

namespace flashindexer::cuda {
namespace {

using scoring::encode_mxfp4_queries;
using scoring::encode_packed_keys;
using scoring::encode_paged_keys;
using scoring::encode_queries;
using scoring::kHeadDim;
using scoring::kTileKeys;
using scoring::ScoreMaps;
using scoring::ScoreParams;
using scoring::ScoringCall;

bool aligned16(const void* pointer) { return reinterpret_cast<uintptr_t>(pointer) % 16 == 0; }

bool is_mxfp4(const QuantizedTensor& q) { return q.values.dtype == DType::kE2M1x2; }

// What the TMA copies need of the operands shared by both forms. (q and the keys have one format:
// src/api checks it.)
Status check_common(const char* op, const QuantizedTensor& q, const TensorView& weights) {
  ArgCheck check(op);
  const bool mxfp4 = is_mxfp4(q);
  if (q.values.dtype != DType::kE4M3 && !mxfp4) {
    return Status::Unsupported(
        concat(op, ": CUDA scoring supports FP8 (e4m3) and MXFP4 (e2m1x2) operands"));
  }
  const int r = q.values.rank;
  const int64_t head_dim = q.values.shape[r - 1] * (mxfp4 ? 2 : 1);
  if (head_dim != kHeadDim) {
    return Status::Unsupported(
        concat(op, ": CUDA scoring supports head_dim 128, q has ", head_dim));
  }
  if (mxfp4) {
    // A converting warp reads a vector's four scales as one word's bytes, heads 4 bytes apart, and
    // the fix-up reads them with the values' row order.
    check.require(q.scales.stride[r - 1] == 1 && q.scales.stride[r - 2] == 4,
                  "q.scales must have its heads and blocks contiguous on CUDA (strides ",
                  q.scales.stride[r - 2], ", ", q.scales.stride[r - 1], ", expected 4, 1)");
    check.require(weights.stride[1] == 1, "weights must have contiguous heads on CUDA; stride is ",
                  weights.stride[1]);
  }
  check.require(aligned16(q.values.data) && q.values.stride[r - 2] % 16 == 0 &&
                    q.values.stride[r - 3] % 16 == 0,
                "q must be 16-byte aligned with row strides a multiple of 16 bytes on "
                "CUDA (TMA); strides are ",
                q.values.stride[r - 3], ", ", q.values.stride[r - 2]);
  check.require(aligned16(weights.data) && (weights.stride[0] * 4) % 16 == 0,
                "weights must be 16-byte aligned with a row stride a multiple of 4 "
                "elements on CUDA (TMA); row stride is ",
                weights.stride[0]);
  return check.status();
}

void mxfp4_query_operands(scoring::Mxfp4Fixup& f, const QuantizedTensor& q, int64_t token_stride,
                          int64_t scale_token_stride, const TensorView& weights);

// The MXFP4 parts of a planned call: the query scales for the kernel, the sticky out-of-span flag
// for it and the fix-up, and the fix-up's view of the query operands (row r at r x token_stride).
Status plan_mxfp4_call(const char* op, scoring::ScoringCall* call, const QuantizedTensor& q,
                       int64_t token_stride, int64_t scale_token_stride,
                       const TensorView& weights) {
  int* flag = scoring::mxfp4_out_of_span_flag();
  if (flag == nullptr) {
    return Status::DeviceError(concat(op, ": the MXFP4 out-of-span flag has no device address"));
  }
  call->mxfp4 = true;
  call->fixup_after = true;
  call->format = {static_cast<const uint8_t*>(q.scales.data), scale_token_stride, flag};
  call->fixup.out_of_span = flag;
  mxfp4_query_operands(call->fixup, q, token_stride, scale_token_stride, weights);
  return Status::Ok();
}

// The fix-up's view of the query operands (row `r` of the call at r x token_stride).
void mxfp4_query_operands(scoring::Mxfp4Fixup& f, const QuantizedTensor& q, int64_t token_stride,
                          int64_t scale_token_stride, const TensorView& weights) {
  f.heads = static_cast<int>(q.values.shape[q.values.rank - 2]);
  f.q_values = static_cast<const uint8_t*>(q.values.data);
  f.q_row_stride = token_stride;
  f.q_head_stride = q.values.stride[q.values.rank - 2];
  f.q_scales = static_cast<const uint8_t*>(q.scales.data);
  f.q_scale_row_stride = scale_token_stride;
  f.weights = weights.ptr<float>();
  f.weights_row_stride = weights.stride[0];
}

// The fix-up's view of the raw keys: the packed workspace, or the paged cache.
void fixup_keys(scoring::Mxfp4Fixup& f, const QuantizedTensor& keys) {
  f.k_values = static_cast<const uint8_t*>(keys.values.data);
  f.k_row_stride = keys.values.stride[0];
  f.k_scales = static_cast<const uint8_t*>(keys.scales.data);
  f.k_scale_row_stride = keys.scales.stride[0];
}
void fixup_cache(scoring::Mxfp4Fixup& f, const PagedKCache& cache) {
  f.cache = static_cast<const uint8_t*>(cache.data);
  f.page_stride = cache.page_stride_bytes;
  f.cache_page_size = cache.page_size;
}

// Keys per work item: enough items for about four per CTA, within [lower, upper].
int64_t plan_chunk_keys(int64_t groups, int64_t keys, int sms, int64_t lower, int64_t upper) {
  const int64_t target_items = 4LL * sms;
  int64_t chunk = (groups * keys + target_items - 1) / std::max<int64_t>(target_items, 1);
  chunk = (chunk + kTileKeys - 1) / kTileKeys * kTileKeys;
  return std::clamp(chunk, lower, upper);
}

// The instantiation of a call: prefill's by H, decode's by H and next_n (visit_shape, call.h).
scoring::KernelShape prefill_shape(int heads) { return {heads, 256, false}; }

scoring::KernelShape paged_shape(int heads, int next_n) {
  if (heads == 64) return {64, 64 * next_n, true};
  return {32, next_n == 3 ? 128 : 32 * next_n, true};
}

bool lane_owned_rows(const scoring::KernelShape& shape) {
  return scoring::visit_shape(shape, [](auto s) {
    using S = decltype(s);
    return scoring::kLaneOwnedRows<S::kHeads, S::kN>;
  });
}

// What the paged kernels need of q and the cache beyond the shared checks of src/api.
void check_paged_source(ArgCheck& check, const QuantizedTensor& q, const PagedKCache& cache) {
  const int64_t batch = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  check.require(cache.format == KFormat::kFP8 || cache.format == KFormat::kMXFP4,
                "cache.format must be FP8 or MXFP4 on CUDA");
  check.require(cache.page_size == 32 || cache.page_size == 64 || cache.page_size == 128,
                "cache.page_size must be 32, 64 or 128 on CUDA; got ", cache.page_size);
  check.require(aligned16(cache.data) && cache.page_stride_bytes % 16 == 0,
                "cache.data must be 16-byte aligned and cache.page_stride_bytes a multiple "
                "of 16 on CUDA (TMA); page_stride_bytes is ",
                cache.page_stride_bytes);
  check.require(next_n >= 1 && next_n <= 4, "q.shape[1] (next_n) must be 1..4 on CUDA; got ",
                next_n);
  check.require(batch <= 1 || q.values.stride[0] == next_n * q.values.stride[1],
                "q must have its batch and next_n dimensions contiguous with each other on CUDA "
                "(q.stride[0] == next_n * q.stride[1])");
}

}  // namespace

namespace scoring {

int scoring_grid(const ScoringCall& call) {
  const ScoreParams& params = call.params;
  if (params.rows == 0 || params.width == 0) return 0;
  return static_cast<int>(std::min<int64_t>(params.groups * params.chunks, call.sms));
}

}  // namespace scoring

Status launch_scoring(const char* op, const ScoringCall& call, bool clean, void* stream_handle) {
  const ScoreParams& params = call.params;
  if (params.rows == 0 || params.width == 0) return Status::Ok();
  auto* stream = static_cast<cudaStream_t>(stream_handle);
  if (Status status =
          to_status(scoring::launch_planned<scoring::StoreEpilogue>(call, {}, stream), op,
                    call.mxfp4 ? "MXFP4 scoring kernel launch" : "scoring kernel launch");
      !status.ok()) {
    return status;
  }
  if (call.fixup_after && scoring::scoring_grid(call) > 0) {
    if (Status status =
            to_status(scoring::launch_mxfp4_fixup(params, call.fixup, call.paged, call.sms, stream),
                      op, "MXFP4 fix-up kernel launch");
        !status.ok()) {
      return status;
    }
  }
  if (!clean) return Status::Ok();
  return to_status(scoring::launch_fill_invisible(params, call.paged, stream), op,
                   "clean fill kernel launch");
}

Status plan_mqa_logits(const char* op, const TensorView& logits, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights, const TensorView& ks,
                       const TensorView& ke, ScoringCall* call) {
  if (Status status = check_common(op, q, weights); !status.ok()) return status;
  ArgCheck check(op);
  check.require(aligned16(keys.values.data) && keys.values.stride[0] % 16 == 0,
                "keys.values must be 16-byte aligned with a row stride a multiple of 16 "
                "bytes on CUDA (TMA); row stride is ",
                keys.values.stride[0]);
  const bool mxfp4 = is_mxfp4(q);
  check.require(aligned16(keys.scales.data) &&
                    (mxfp4 ? keys.scales.stride[0] == 4 && keys.scales.stride[1] == 1
                           : keys.scales.stride[0] == 1),
                "keys.scales must be contiguous and 16-byte aligned on CUDA (TMA)");
  const int64_t rows = q.values.shape[0];
  const int heads = static_cast<int>(q.values.shape[1]);
  const int64_t num_keys = keys.values.shape[0];
  check.require(rows * heads < (int64_t{1} << 31) && num_keys < (int64_t{1} << 31),
                "rows x heads and keys must stay below 2^31 on CUDA; got ", rows, " x ", heads,
                " and ", num_keys);
  if (!check.ok()) return check.status();

  ScoreParams params;
  params.rows = rows;
  params.rows_per_group = 256 / heads;
  params.groups = (rows + params.rows_per_group - 1) / params.rows_per_group;
  params.width = logits.shape[1];
  params.ks = ks.ptr<int32_t>();
  params.ke = ke.ptr<int32_t>();
  params.num_keys = num_keys;
  params.logits = logits.ptr<float>();
  params.logits_stride = logits.stride[0];
  const int64_t key_span = std::max<int64_t>(std::min(num_keys, params.width), 1);
  const int sms = multiprocessor_count();
  params.chunk_keys = plan_chunk_keys(params.groups, key_span, sms, 512, 4096);
  params.chunks = (key_span + params.chunk_keys - 1) / params.chunk_keys;

  const scoring::KernelShape kernel = prefill_shape(heads);
  ScoreMaps maps{};
  if (rows > 0 && num_keys > 0) {
    if (Status status =
            mxfp4 ? encode_mxfp4_queries(maps, op, q.values, rows, q.values.stride[0], heads,
                                         weights, params.rows_per_group, params.rows_per_group)
                  : encode_queries(maps, op, q.values, rows, q.values.stride[0], heads, weights,
                                   params.rows_per_group, lane_owned_rows(kernel));
        !status.ok()) {
      return status;
    }
    if (Status status = encode_packed_keys(maps, op, keys, kTileKeys, kTileKeys); !status.ok()) {
      return status;
    }
  } else {
    params.chunks = 0;  // nothing to score; the clean fill still runs
  }
  *call = ScoringCall{maps, params, kernel, sms, false};
  if (mxfp4) {
    if (Status status =
            plan_mxfp4_call(op, call, q, q.values.stride[0], q.scales.stride[0], weights);
        !status.ok()) {
      return status;
    }
    fixup_keys(call->fixup, keys);
  }
  return Status::Ok();
}

Status mqa_logits(const TensorView& logits, const QuantizedTensor& q, const QuantizedTensor& keys,
                  const TensorView& weights, const TensorView& ks, const TensorView& ke, bool clean,
                  void* stream, void* workspace, size_t workspace_bytes, bool* keys_ready) {
  const char* op = "mqa_logits";
  ScoringCall call;
  if (Status status = plan_mqa_logits(op, logits, q, keys, weights, ks, ke, &call); !status.ok()) {
    return status;
  }
  if (call.mxfp4 && workspace != nullptr && call.params.chunks > 0) {
    return launch_mqa_logits_preconverted(op, call, logits, q, keys, ks, ke, clean, workspace,
                                          workspace_bytes, keys_ready, stream);
  }
  return launch_scoring(op, call, clean, stream);
}

Status plan_paged_mqa_logits(const char* op, const TensorView& logits, const QuantizedTensor& q,
                             const PagedKCache& cache, const TensorView& weights,
                             const TensorView& context_lens, const TensorView& block_table,
                             ScoringCall* call) {
  if (Status status = check_common(op, q, weights); !status.ok()) return status;
  ArgCheck check(op);
  const int64_t batch = q.values.shape[0];
  const int next_n = static_cast<int>(q.values.shape[1]);
  const int heads = static_cast<int>(q.values.shape[2]);
  check_paged_source(check, q, cache);
  check.require(batch * next_n * heads < (int64_t{1} << 31) && cache.num_pages < (int64_t{1} << 31),
                "rows x heads and cache.num_pages must stay below 2^31 on CUDA");
  const bool mxfp4 = is_mxfp4(q);
  if (mxfp4) {
    check.require(batch <= 1 || q.scales.stride[0] == next_n * q.scales.stride[1],
                  "q.scales must have its batch and next_n dimensions contiguous with each other "
                  "on CUDA (q.scales.stride[0] == next_n * q.scales.stride[1])");
  }
  if (!check.ok()) return check.status();

  ScoreParams params;
  params.rows = batch * next_n;
  params.rows_per_group = next_n;
  params.groups = batch;
  params.width = logits.shape[1];
  params.context_lens = context_lens.ptr<int32_t>();
  params.lens_stride_b = context_lens.stride[0];
  params.lens_2d = context_lens.rank == 2;
  params.lens_stride_j = params.lens_2d ? context_lens.stride[1] : 0;
  params.block_table = block_table.ptr<int32_t>();
  params.table_stride_b = block_table.stride[0];
  params.table_stride_p = block_table.stride[1];
  params.table_pages = block_table.shape[1];
  params.page_size = cache.page_size;
  params.page_shift = cache.page_size == 32 ? 5 : cache.page_size == 64 ? 6 : 7;
  params.logits = logits.ptr<float>();
  params.logits_stride = logits.stride[0];
  const int64_t key_span =
      std::max<int64_t>(std::min(params.width, params.table_pages * cache.page_size), 1);
  const int sms = multiprocessor_count();
  // Decode CTAs take equal shares of all key tiles (decode_share.cuh); the chunks only size the
  // grid: one CTA per SM, or one per 256 keys of the batch at its widest when that is fewer.
  params.chunk_keys = plan_chunk_keys(batch, key_span, sms, 256, 2048);
  params.chunks = (key_span + params.chunk_keys - 1) / params.chunk_keys;

  const scoring::KernelShape kernel = paged_shape(heads, next_n);
  ScoreMaps maps{};
  if (params.rows > 0 && cache.num_pages > 0 && params.table_pages > 0) {
    // The MXFP4 Q copy brings the rows the FP8 tile holds: with lane-owned rows, whole tiles.
    const int mxfp4_box_rows = lane_owned_rows(kernel) ? kernel.columns / heads : next_n;
    if (Status status =
            mxfp4 ? encode_mxfp4_queries(maps, op, q.values, params.rows, q.values.stride[1], heads,
                                         weights, next_n, mxfp4_box_rows)
                  : encode_queries(maps, op, q.values, params.rows, q.values.stride[1], heads,
                                   weights, next_n, lane_owned_rows(kernel));
        !status.ok()) {
      return status;
    }
    const int rows_per_copy = std::min(kTileKeys, cache.page_size);
    if (Status status = encode_paged_keys(maps, op, cache, rows_per_copy); !status.ok()) {
      return status;
    }
  } else {
    params.chunks = 0;
  }
  *call = ScoringCall{maps, params, kernel, sms, true};
  if (mxfp4) {
    if (Status status =
            plan_mxfp4_call(op, call, q, q.values.stride[1], q.scales.stride[1], weights);
        !status.ok()) {
      return status;
    }
    fixup_cache(call->fixup, cache);
  }
  return Status::Ok();
}

Status paged_mqa_logits(const TensorView& logits, const QuantizedTensor& q,
                        const PagedKCache& cache, const TensorView& weights,
                        const TensorView& context_lens, const TensorView& block_table, bool clean,
                        void* stream) {
  const char* op = "paged_mqa_logits";
  ScoringCall call;
  if (Status status =
          plan_paged_mqa_logits(op, logits, q, cache, weights, context_lens, block_table, &call);
      !status.ok()) {
    return status;
  }
  return launch_scoring(op, call, clean, stream);
}

namespace {

// The sparse instantiation for (H, sparse block, source): N = H, one row per work item.
template <int kHeads>
cudaError_t launch_sparse_instance(const ScoreMaps& maps, const ScoreParams& params,
                                   const scoring::SparseKeyAddresses& source, int block, bool paged,
                                   int grid, cudaStream_t stream) {
  using scoring::launch_score_sparse;
  if (block == 8) {
    return paged ? launch_score_sparse<kHeads, 8, true>(maps, params, source, grid, stream)
                 : launch_score_sparse<kHeads, 8, false>(maps, params, source, grid, stream);
  }
  return paged ? launch_score_sparse<kHeads, 16, true>(maps, params, source, grid, stream)
               : launch_score_sparse<kHeads, 16, false>(maps, params, source, grid, stream);
}

// Where the FP8 sparse kernel's lanes gather the keys from (format_sparse.cuh).
scoring::SparseKeyAddresses sparse_key_addresses(const SparseScoring& call) {
  scoring::SparseKeyAddresses source;
  if (call.cache != nullptr) {
    source.keys = static_cast<const uint8_t*>(call.cache->data);
    source.page_stride = call.cache->page_stride_bytes;
    source.page_size = call.cache->page_size;
  } else {
    source.keys = static_cast<const uint8_t*>(call.keys->values.data);
    source.key_stride = call.keys->values.stride[0];
    source.num_keys = call.keys->values.shape[0];
    source.scales = call.keys->scales.ptr<float>();
  }
  return source;
}

// The sparse MXFP4 instantiation in the arithmetic of the dense call the rows stand for
// (format_mxfp4_sparse.cuh): the converting format's for the packed source (prefill's) and for a
// paged source whose dense decode tile is over kMaxRegisterKeyColumns wide (H = 64, next_n 4);
// the register format's for the other paged ones.
template <int kHeads>
cudaError_t launch_sparse_mxfp4_instance(const ScoreMaps& maps, const ScoreParams& params,
                                         const scoring::Mxfp4Params& format, int block, bool paged,
                                         bool converter_bits, int grid, cudaStream_t stream) {
  using scoring::launch_score_sparse_mxfp4;
  if (!paged) {
    return block == 8 ? launch_score_sparse_mxfp4<kHeads, 8, false, true>(maps, params, format,
                                                                          grid, stream)
                      : launch_score_sparse_mxfp4<kHeads, 16, false, true>(maps, params, format,
                                                                           grid, stream);
  }
  if (!converter_bits) {
    return block == 8 ? launch_score_sparse_mxfp4<kHeads, 8, true, false>(maps, params, format,
                                                                          grid, stream)
                      : launch_score_sparse_mxfp4<kHeads, 16, true, false>(maps, params, format,
                                                                           grid, stream);
  }
  if constexpr (kHeads == 64) {
    return block == 8
               ? launch_score_sparse_mxfp4<64, 8, true, true>(maps, params, format, grid, stream)
               : launch_score_sparse_mxfp4<64, 16, true, true>(maps, params, format, grid, stream);
  }
  return cudaErrorNotSupported;  // every H = 32 decode tile is a register one
}

}  // namespace

Status launch_sparse_scoring(const char* op, const SparseScoring& call, bool clean,
                             void* stream_handle) {
  const bool mxfp4 = call.q.dtype == DType::kE2M1x2;
  const QuantizedTensor q{call.q, call.q_scales};
  if (Status status = check_common(op, q, call.weights); !status.ok()) return status;
  const int64_t rows = call.q.shape[0];
  const int heads = static_cast<int>(call.q.shape[1]);
  const int block = call.sparse_block;
  ScoreParams params;
  params.rows = rows;
  params.groups = rows;
  params.rows_per_group = 1;
  params.width = call.logits.shape[1];
  params.context_lens = call.end;  // row r sees sparse columns [0, end[r])
  params.lens_stride_b = 1;
  params.block_table = call.entries;  // read with unit stride (TileLoader)
  params.table_stride_b = call.entry_stride;
  params.table_stride_p = 1;
  params.table_pages = call.entries_per_row;
  params.page_size = block;
  params.page_shift = block == 8 ? 3 : 4;
  params.logits = call.logits.ptr<float>();
  params.logits_stride = call.logits.stride[0];
  if (rows == 0 || params.width == 0) return Status::Ok();
  const int sms = multiprocessor_count();
  const int64_t key_span =
      std::max<int64_t>(std::min(params.width, call.entries_per_row * block), 1);
  params.chunk_keys = plan_chunk_keys(rows, key_span, sms, 256, 2048);
  params.chunks = (key_span + params.chunk_keys - 1) / params.chunk_keys;

  ScoreMaps maps{};
  if (Status status =
          mxfp4 ? encode_mxfp4_queries(maps, op, call.q, rows, call.q.stride[0], heads,
                                       call.weights, 1, 1)
                : encode_queries(maps, op, call.q, rows, call.q.stride[0], heads, call.weights, 1,
                                 /*lane_owned_rows=*/false);
      !status.ok()) {
    return status;
  }
  // The keys' maps: the MXFP4 formats copy blocks through them (the packed form's scale copies
  // start on an aligned key before the block, format_sparse.cuh); for FP8 their encoding checks
  // the alignment and strides that its lanes' 16-byte copies need as well.
  const int packed_scale_box = block == 8 ? scoring::SparseBlocks<8, false, 1>::kScaleBox
                                          : scoring::SparseBlocks<16, false, 1>::kScaleBox;
  if (Status status = call.cache != nullptr
                          ? encode_paged_keys(maps, op, *call.cache, block)
                          : encode_packed_keys(maps, op, *call.keys, block, packed_scale_box);
      !status.ok()) {
    return status;
  }
  auto* stream = static_cast<cudaStream_t>(stream_handle);
  const int grid = static_cast<int>(std::min<int64_t>(params.groups * params.chunks, sms));
  const bool paged = call.cache != nullptr;
  if (mxfp4) {
    ScoringCall planned{maps, params, {}, sms, true};
    if (Status status = plan_mxfp4_call(op, &planned, q, call.q.stride[0], call.q_scales.stride[0],
                                        call.weights);
        !status.ok()) {
      return status;
    }
    scoring::Mxfp4Fixup& fixup = planned.fixup;
    fixup.sparse_block = block;
    if (paged) {
      fixup_cache(fixup, *call.cache);
    } else {
      fixup_keys(fixup, *call.keys);
    }
    if (call.converted != nullptr && !paged) {
      // The preconverted operands through the FP8 kernel: the converting format's bits (the
      // packed form's register conversion computes those too).
      SparseScoring fp8 = call;
      fp8.q = call.converted->q.values;
      fp8.q_scales = {};
      fp8.weights = call.converted->weights;
      fp8.keys = &call.converted->keys;
      fp8.converted = nullptr;
      if (Status status = launch_sparse_scoring(op, fp8, /*clean=*/false, stream_handle);
          !status.ok()) {
        return status;
      }
    } else {
      const bool converter_bits =
          !paged || paged_shape(heads, call.next_n).columns > scoring::kMaxRegisterKeyColumns;
      const cudaError_t launched =
          heads == 64 ? launch_sparse_mxfp4_instance<64>(maps, params, planned.format, block, paged,
                                                         converter_bits, grid, stream)
                      : launch_sparse_mxfp4_instance<32>(maps, params, planned.format, block, paged,
                                                         converter_bits, grid, stream);
      if (Status status = to_status(launched, op, "sparse MXFP4 scoring kernel launch");
          !status.ok()) {
        return status;
      }
    }
    if (Status status =
            to_status(scoring::launch_mxfp4_fixup(params, fixup, /*paged=*/true, sms, stream), op,
                      "MXFP4 fix-up kernel launch");
        !status.ok()) {
      return status;
    }
  } else {
    const scoring::SparseKeyAddresses addresses = sparse_key_addresses(call);
    const cudaError_t launched =
        heads == 64
            ? launch_sparse_instance<64>(maps, params, addresses, block, paged, grid, stream)
            : launch_sparse_instance<32>(maps, params, addresses, block, paged, grid, stream);
    if (Status status = to_status(launched, op, "sparse scoring kernel launch"); !status.ok()) {
      return status;
    }
  }
  if (!clean) return Status::Ok();
  return to_status(scoring::launch_fill_invisible(params, /*paged=*/true, stream), op,
                   "clean fill kernel launch");
}

Status check_sparse_paged_source(const char* op, const QuantizedTensor& q,
                                 const PagedKCache& cache) {
  ArgCheck check(op);
  check_paged_source(check, q, cache);
  if (is_mxfp4(q)) {
    check.require(
        q.values.shape[0] <= 1 || q.scales.stride[0] == q.values.shape[1] * q.scales.stride[1],
        "q.scales must have its batch and next_n dimensions contiguous with each other "
        "on CUDA (q.scales.stride[0] == next_n * q.scales.stride[1])");
  }
  constexpr int64_t kMostPages = int64_t{1} << (31 - scoring::kSparseRowBits);
  check.require(cache.num_pages < kMostPages, "cache.num_pages must be below ", kMostPages,
                " for sparse scoring on CUDA; got ", cache.num_pages);
  return check.status();
}

TensorView decode_query_rows(const TensorView& q, int64_t first, int64_t count) {
  TensorView rows = q;
  rows.data = static_cast<uint8_t*>(q.data) + first * q.stride[0];  // one-byte elements
  rows.rank = 3;
  rows.shape[0] = count * q.shape[1];
  rows.shape[1] = q.shape[2];
  rows.shape[2] = q.shape[3];
  rows.stride[0] = q.stride[1];
  rows.stride[1] = q.stride[2];
  rows.stride[2] = q.stride[3];
  return rows;
}

}  // namespace flashindexer::cuda
