// SPDX-License-Identifier: Apache-2.0
// The fused CUDA indexer: top-k without writing the [rows, keys] logits. Host code only.
//
// Per batch of rows (the arrays below live in the caller's workspace, so memory is fixed):
//  1. sample: the scoring kernel scores every tile_stride-th key tile of each row (<= 128 tiles
//     of the widest row) into a small sample buffer;
//  2. gate: per row, a lower bound of the sample's rank-r score, with r set so that about
//     k (1 + 4 / sqrt(q)) keys pass (rows that fit the candidate slots take every key); the
//     sampled keys that pass become the row's first candidates. A row whose sampled keys at or
//     above the gate predict more than twice its slots (heavy ties) is marked overflowing;
//  3. scan: the scoring kernel computes every other score, with the same arithmetic as
//     mqa_logits, and appends the keys at or above the gate to the row's candidate slots as rank
//     keys (queued per warp in shared memory, placed in bulk), counting on past the capacity;
//  4. select: the fused select kernel selects each complete row's k best candidates and writes
//     them best first, or in ascending index order when unsorted output was asked for (never in
//     slot order, which the atomics decide); for a row whose candidates are incomplete
//     (overflow, or fewer than min(k, length) keys passed) it writes nothing but the row's
//     visible range into the fallback ranges ([0, 0) for complete rows) and counts the row;
//  5. fallback: those rows go through the dense pair, mqa_logits into a logits slab (laid over
//     the batch's candidates, dead by then) + its top-k (select.h), with every other row's range
//     empty (their scoring work items are skipped, the counted rows' keys spread over the grid,
//     and the top-k leaves the other answers alone).
// With a scores output (IndexerOptions::scores), a kernel between 4 and 5 writes the complete
// rows' selected scores from their candidates (candidate_scores.h), and each fallback batch's
// rows get theirs gathered from its logits (indexer/selected_scores.h). A source layer's
// candidate output (IndexerOptions::candidate_source): the scan also folds every score into its
// candidate block's maximum (block_max.cuh), then after 3 a kernel adds the sampled tiles and
// makes the block scores (block_scores.h), and the top-C of select_candidate_blocks follows.
// So the answer is topk_per_row(mqa_logits(...)) bit for bit: the candidates are the very scores
// the dense path stores, and a row either holds every key above its k-th or takes the dense path.
// MXFP4 (sm90_scoring/format_mxfp4.cuh): an out-of-span vector's scores are NaN marks until the
// fix-up computes them, so a row that meets one (the scan and the gate mark it, gate.h) takes the
// fallback, gated or not, whose scoring runs the fix-up; decode scans with the MXFP4 emitting
// kernels, prefill converts its operands into the workspace first (PrefillConversion).
// All decisions on the host come from shapes: no host sync, graph-capturable.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/checks.h"
#include "core/heuristics.h"
#include "cuda/candidates/select.h"
#include "cuda/common/check.h"
#include "cuda/cuda_ops.h"
#include "cuda/indexer/dense_indexer.h"
#include "cuda/indexer/selected_scores.h"
#include "cuda/indexer/slab.h"
#include "cuda/sm90_fused/block_scores.h"
#include "cuda/sm90_fused/candidate_scores.h"
#include "cuda/sm90_fused/emit_epilogue.cuh"
#include "cuda/sm90_fused/fused_indexer.h"
#include "cuda/sm90_fused/gate.h"
#include "cuda/sm90_fused/select.h"
#include "cuda/sm90_fused/workspace.h"
#include "cuda/sm90_scoring/call.h"

namespace flashindexer::cuda {
namespace {

using fused::FusedShape;
using fused::RowArrays;
using scoring::kTileKeys;
using scoring::ScoringCall;

int default_capacity(int k) { return heuristics::fused_candidate_capacity(k); }

TensorView device_i32(int32_t* data, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, DType::kI32, shape, Device::kCUDA);
}

QuantizedTensor leading_query_rows(const QuantizedTensor& q, int64_t first, int64_t count) {
  return {leading_rows(q.values, first, count), leading_rows(q.scales, first, count)};
}

bool is_mxfp4(const QuantizedTensor& q) { return q.values.dtype == DType::kE2M1x2; }

// The batches' slab and row arrays, carved from the workspace (Carved::rows: a batch's rows).
struct Carved {
  Slab slab;
  RowArrays arrays;
  int64_t rows = 0;
};

// An MXFP4 prefill call's operands, preconverted into the workspace batch by batch (the keys by
// the first batch): its scan is the FP8 emitting kernel's, since the converting kernel's
// producer warps are its converters where the emitting prefill's are its emitters. Each FP8
// call carries the raw call's fix-up (fixup_after), which the fallback's scoring runs.
struct PrefillConversion {
  ConvertedOperands space;
  PreconvertedOperands operands;  // the current batch's queries and weights, every key
  int64_t first = 0;              // the current batch's first row
  bool skipped = false;           // the workspace cannot hold them: nothing was run
};

// The prefill / decode differences: how rows [first, first + count) are scored, what their
// ranges are, and the fallback ranges' form. Rows come in whole row units (next_n for decode).
struct PrefillForm {
  const QuantizedTensor& q;
  const QuantizedTensor& keys;
  const TensorView& weights;
  const TensorView& ks;
  const TensorView& ke;
  PrefillConversion* conversion;  // MXFP4 only
  static constexpr bool kPaged = false;

  // carve(options, Carved*) for the workspace less the converted operands' region.
  template <typename Carve>
  Status carve_batches(const RunOptions& options, Carve carve, Carved* carved) const {
    if (conversion == nullptr) return carve(options, carved);
    // Whole scoring groups (4 rows at H = 64, 8 at H = 32) per batch, as the dense path.
    const int64_t group_rows = 256 / q.values.shape[1];
    if (Status status = carve_prefill_batches(options, q, keys.values.shape[0], group_rows, carve,
                                              carved, &conversion->space, /*with_flag=*/true);
        !status.ok()) {
      return status;
    }
    // (No keys: nothing to convert, and the dense path answers the empty rows.)
    conversion->skipped = conversion->space.workspace == nullptr && q.values.shape[0] > 0;
    return Status::Ok();
  }
  bool skipped() const { return conversion != nullptr && conversion->skipped; }
  // MXFP4: converts batch [first, first + count)'s queries, and on the first batch the keys.
  Status begin_batch(const char* op, const TensorView& logits, int64_t first, int64_t count,
                     void* stream) const {
    if (conversion == nullptr) return Status::Ok();
    conversion->first = first;
    ConvertedOperands& space = conversion->space;
    return preconvert_mxfp4_rows(
        op, logits, leading_query_rows(q, first, count), keys, leading_rows(weights, first, count),
        leading_rows(ks, first, count), leading_rows(ke, first, count), space.workspace,
        space.bytes, &space.keys_ready, space.keys_flagged, stream, &conversion->operands);
  }
  // The gate's MXFP4 marks (gate.h) of the current batch.
  void mark_rows(fused::RowState& state) const {
    if (conversion == nullptr) return;
    state.keys_flagged = conversion->space.keys_flagged;
    state.weights = conversion->operands.weights.ptr<float>();
    state.heads = static_cast<int>(q.values.shape[1]);
    state.weights_stride = conversion->operands.weights.stride[0];
  }

  Status plan(const char* op, const TensorView& logits, int64_t first, int64_t count,
              const TensorView& row_ks, const TensorView& row_ke, ScoringCall* call) const {
    ScoringCall raw;
    if (Status status = plan_mqa_logits(op, logits, leading_query_rows(q, first, count), keys,
                                        leading_rows(weights, first, count), row_ks, row_ke,
                                        conversion != nullptr ? &raw : call);
        conversion == nullptr || !status.ok()) {
      return status;
    }
    const int64_t local = first - conversion->first;
    const PreconvertedOperands& converted = conversion->operands;
    const PreconvertedOperands rows{leading_query_rows(converted.q, local, count), converted.keys,
                                    leading_rows(converted.weights, local, count)};
    return plan_preconverted(op, raw, rows, logits, row_ks, row_ke, call);
  }
  Status plan(const char* op, const TensorView& logits, int64_t first, int64_t count,
              ScoringCall* call) const {
    return plan(op, logits, first, count, leading_rows(ks, first, count),
                leading_rows(ke, first, count), call);
  }
  RowRanges ranges(int64_t first, int64_t count) const {
    return RowRanges::prefill(leading_rows(ks, first, count), leading_rows(ke, first, count));
  }
  // Fallback ranges of rows [first, first + count), given as arrays of those rows.
  Status plan_fallback(const char* op, const TensorView& logits, int64_t first, int64_t count,
                       int32_t* lo, int32_t* hi, ScoringCall* call) const {
    return plan(op, logits, first, count, device_i32(lo, {count}), device_i32(hi, {count}), call);
  }
  RowRanges fallback_ranges(int32_t* lo, int32_t* hi, int64_t count) const {
    return RowRanges::prefill(device_i32(lo, {count}), device_i32(hi, {count}));
  }
};

struct DecodeForm {
  const QuantizedTensor& q;
  const PagedKCache& cache;
  const TensorView& weights;
  const TensorView& context_lens;
  const TensorView& block_table;
  int next_n;
  static constexpr bool kPaged = true;

  // MXFP4 decode scores the cache in its own kernels, the emitting one too (no conversion).
  template <typename Carve>
  Status carve_batches(const RunOptions& options, Carve carve, Carved* carved) const {
    return carve(options, carved);
  }
  bool skipped() const { return false; }
  Status begin_batch(const char*, const TensorView&, int64_t, int64_t, void*) const {
    return Status::Ok();
  }
  void mark_rows(fused::RowState&) const {}

  Status plan_requests(const char* op, const TensorView& logits, int64_t first, int64_t count,
                       const TensorView& lens, ScoringCall* call) const {
    const int64_t request = first / next_n;
    const int64_t requests = count / next_n;
    return plan_paged_mqa_logits(op, logits, leading_query_rows(q, request, requests), cache,
                                 leading_rows(weights, first, count), lens,
                                 leading_rows(block_table, request, requests), call);
  }
  Status plan(const char* op, const TensorView& logits, int64_t first, int64_t count,
              ScoringCall* call) const {
    return plan_requests(op, logits, first, count,
                         leading_rows(context_lens, first / next_n, count / next_n), call);
  }
  RowRanges ranges(int64_t first, int64_t count) const {
    return RowRanges::decode(leading_rows(context_lens, first / next_n, count / next_n), next_n);
  }
  // The fallback's lengths are 2-D [requests, next_n]: row r's length is hi[r].
  Status plan_fallback(const char* op, const TensorView& logits, int64_t first, int64_t count,
                       int32_t*, int32_t* hi, ScoringCall* call) const {
    return plan_requests(op, logits, first, count, device_i32(hi, {count / next_n, next_n}), call);
  }
  RowRanges fallback_ranges(int32_t*, int32_t* hi, int64_t count) const {
    return RowRanges::decode(device_i32(hi, {count / next_n, next_n}), next_n);
  }
};

// The fallback of rows [first, first + count): dense scoring + top-k over the slab, batch by
// batch, for the rows the fallback ranges keep (the others are empty: no work, and the top-k
// leaves their rows, which the select has written). lo / hi: the fallback ranges of these rows;
// live: how many of them are not empty. scores (optional): the rows' selected scores, gathered
// from the fallback's logits for the rows it selects.
template <typename Form>
Status run_fallback(const char* op, const Form& form, const FusedShape& shape, const Slab& slab,
                    const TensorView& out, const TensorView& scores, int64_t first, int64_t count,
                    int32_t* lo, int32_t* hi, const int32_t* live, bool sorted, void* stream) {
  for (int64_t done = 0; done < count; done += slab.rows) {
    const int64_t part = std::min(slab.rows, count - done);
    const TensorView logits = slab_view(slab, part, shape.width);
    ScoringCall call;
    if (Status status = form.plan_fallback(op, logits, first + done, part,
                                           lo == nullptr ? nullptr : lo + done, hi + done, &call);
        !status.ok()) {
      return status;
    }
    // Prefill: the kernel sizes its items by the live rows (a row alone took ~1 ms of one CTA
    // as a single item of 128K keys). Decode: no more CTAs than requests (the shares skip the
    // empty ones and spread the others' tiles).
    if constexpr (Form::kPaged) {
      call.params.chunk_keys *= call.params.chunks;
      call.params.chunks = std::min<int64_t>(call.params.chunks, 1);
    } else {
      call.params.live_rows = live;
    }
    if (Status status = launch_scoring(op, call, false, stream); !status.ok()) return status;
    const RowRanges ranges =
        form.fallback_ranges(lo == nullptr ? nullptr : lo + done, hi + done, part);
    if (Status status = fused::fallback_topk(leading_rows(out, first + done, part), logits, ranges,
                                             shape.k, sorted, slab.topk_run);
        !status.ok()) {
      return status;
    }
    if (scores.defined()) {
      if (Status status = gather_selected_scores(leading_rows(scores, first + done, part),
                                                 leading_rows(out, first + done, part), logits,
                                                 ranges, shape.k, EmptyScoreRows::kLeave, stream);
          !status.ok()) {
        return status;
      }
    }
  }
  return Status::Ok();
}

// A source layer's candidate blocks of rows [first, first + count): the block scores from the
// scan's entries and the sample (block_scores.h), then their top-C.
Status publish_blocks(const char* op, const FusedShape& shape, const fused::RowArrays& arrays,
                      const ScoringCall& call, const CandidateOutput& source, const Slab& slab,
                      int64_t first, int64_t count, bool paged) {
  fused::BlockScoresParams params;
  params.ranges = call.params;
  params.entries = arrays.block_entries;
  params.pitch = shape.block_pitch;
  params.block_size = shape.block_size;
  params.row_blocks = arrays.row_blocks;
  if (shape.gated) {
    params.sample = arrays.sample;
    params.sample_stride = shape.sample_stride;
    params.tile_shift = shape.tile_shift;
  }
  auto* stream = static_cast<cudaStream_t>(slab.topk_run.cuda_stream);
  if (Status status = to_status(fused::launch_block_scores(params, count, paged, stream), op,
                                "block scores kernel launch");
      !status.ok()) {
    return status;
  }
  candidates::BlockSelectScratch scratch;
  scratch.scores = arrays.block_entries;
  scratch.pitch = shape.block_pitch;
  scratch.row_blocks = arrays.row_blocks;
  scratch.topk_run = slab.topk_run;
  const TensorView blocks = leading_rows(source.blocks, first, count);
  return candidates::select_top_blocks(op, blocks.ptr<int32_t>(), blocks.stride[0], count,
                                       (shape.width + shape.block_size - 1) / shape.block_size,
                                       static_cast<int>(source.blocks.shape[1]), scratch);
}

template <typename Form>
Status run_fused(const char* op, const Form& form, const TensorView& out, const TensorView& scores,
                 const CandidateOutput& source, int64_t rows, int64_t width, int64_t row_unit,
                 int k, bool sorted, const RunOptions& options, const FusedConfig& config) {
  if (width > fused::kMaxEmitKeys) {
    return Status::InvalidArgument(concat(
        op, ": the fused path (RunOptions.indexer_path) takes rows of at most 2^29 keys; got ",
        width, " keys per row (the dense path takes any)"));
  }
  FusedShape shape(width, k, config.capacity > 0 ? config.capacity : default_capacity(k));
  if (source.defined()) shape.publish_blocks(source.block_size);
  // The kept arrays of as many rows as the region holds with their candidates and samples (no
  // more than all rows need); the rest is the logits slab, which the batch's candidates and
  // sample share with its fallback.
  auto keep = [&](size_t region) {
    const auto fit =
        static_cast<int64_t>(region / (shape.overlay_row_bytes() + shape.kept_row_bytes()));
    return shape.kept_bytes(std::min(fit, rows));
  };
  // The top-k scratch serves the select's fallback and a source layer's top-C of its blocks.
  const int topk_k = source.defined() ? std::max(k, static_cast<int>(source.blocks.shape[1])) : k;
  auto carve = [&](const RunOptions& from, Carved* carved) {
    if (Status status = carve_slab(op, from, width, topk_k, row_unit, shape.kept_bytes(row_unit),
                                   shape.overlay_bytes(row_unit), keep, &carved->slab);
        !status.ok()) {
      return status;
    }
    carved->arrays = fused::carve_rows(carved->slab, shape, rows, row_unit);
    carved->rows = carved->arrays.rows;
    return Status::Ok();
  };
  Carved carved;
  if (Status status = form.carve_batches(options, carve, &carved); !status.ok() || form.skipped()) {
    return status;
  }
  const Slab& slab = carved.slab;
  const RowArrays& arrays = carved.arrays;
  // MXFP4: rows that meet an out-of-span vector's NaN mark take the fallback, gated or not.
  const bool mxfp4 = is_mxfp4(form.q);
  const bool falls_back = shape.gated || mxfp4;
  auto* stream = static_cast<cudaStream_t>(options.cuda_stream);
  for (int64_t first = 0; first < rows; first += arrays.rows) {
    const int64_t count = std::min(arrays.rows, rows - first);
    // The sample buffer is the logits of the sampling launch: [count, width], row stride
    // sample_stride (it stores tile t at column block t / tile_stride).
    TensorView sample_view =
        TensorView::contiguous(arrays.sample, DType::kF32, {count, width}, Device::kCUDA)
            .with_row_stride(shape.sample_stride);
    if (Status status = form.begin_batch(op, sample_view, first, count, stream); !status.ok()) {
      return status;
    }
    ScoringCall call;
    if (Status status = form.plan(op, sample_view, first, count, &call); !status.ok()) {
      return status;
    }
    fused::RowState state;
    state.ranges = call.params;
    state.sample = shape.gated ? arrays.sample : nullptr;
    state.sample_stride = shape.sample_stride;
    state.tile_stride = shape.tile_stride;
    state.gate = arrays.gate;
    state.candidates = arrays.candidates;
    state.counts = arrays.counts;
    state.capacity = shape.capacity;
    state.k = k;
    state.fallback_rows = arrays.fallback_rows;
    state.nan_falls_back = mxfp4;
    form.mark_rows(state);
    if (shape.gated) {
      ScoringCall sample = call;
      sample.fixup_after = false;  // the fix-up reads logits laid out by key, not a sample
      sample.params.filter.tile_stride = shape.tile_stride;
      sample.params.filter.tile_shift = shape.tile_shift;
      sample.params.chunk_keys *= shape.tile_stride;
      sample.params.chunks = (sample.params.chunks + shape.tile_stride - 1) / shape.tile_stride;
      if (Status status = launch_scoring(op, sample, false, stream); !status.ok()) return status;
    }
    if (Status status = to_status(fused::launch_gate(state, count, Form::kPaged, stream), op,
                                  "gate kernel launch");
        !status.ok()) {
      return status;
    }
    ScoringCall scan = call;
    scan.params.logits = nullptr;
    fused::EmitParams emit;
    emit.gate = arrays.gate;
    emit.candidates = arrays.candidates;
    emit.candidate_counts = arrays.counts;
    emit.candidate_capacity = shape.capacity;
    if (shape.block_size > 0) {
      emit.block_max = arrays.block_entries;
      emit.block_pitch = shape.block_pitch;
      emit.block_size = shape.block_size;
      // The atomic entries start at 0 (nothing folded); a decode row at block size 8 has its
      // groups as blocks (it starts at key 0) and stores floats only.
      if (!Form::kPaged || shape.block_size != fused::kGroupKeys) {
        if (Status status = to_status(
                cudaMemsetAsync(arrays.block_entries, 0,
                                static_cast<size_t>(count) * shape.block_pitch * sizeof(float),
                                stream),
                op, "block entries reset");
            !status.ok()) {
          return status;
        }
      }
    }
    if (shape.gated) {  // the gate has emitted the sampled tiles' keys
      scan.params.filter.tile_stride = shape.tile_stride;
      scan.params.filter.tile_shift = shape.tile_shift;
      scan.params.filter.skip_sampled = true;
    }
    if (Status status = to_status(scoring::launch_planned<fused::EmitEpilogue>(scan, emit, stream),
                                  op, "scoring kernel launch");
        !status.ok()) {
      return status;
    }
    if (shape.block_size > 0) {
      if (Status status =
              publish_blocks(op, shape, arrays, call, source, slab, first, count, Form::kPaged);
          !status.ok()) {
        return status;
      }
    }
    // The candidates sit in their slots in the order the scan's atomics were served; the
    // select writes unsorted answers in ascending index order, like every top-k path.
    fused::SelectParams select{};
    select.answer = topk::make_params(leading_rows(out, first, count), form.ranges(first, count),
                                      width, k, sorted);
    select.candidates = arrays.candidates;
    select.counts = arrays.counts;
    select.capacity = shape.capacity;
    if (falls_back) {  // only gated rows and MXFP4 rows can be incomplete
      select.fallback_lo = Form::kPaged ? nullptr : arrays.fallback_lo;
      select.fallback_hi = arrays.fallback_hi;
      select.fallback_rows = arrays.fallback_rows;
    }
    if (Status status =
            to_status(fused::launch_select(select, count, stream), op, "select kernel launch");
        !status.ok()) {
      return status;
    }
    if (scores.defined()) {  // before the fallback's logits overwrite the candidates
      fused::CandidateScoresParams candidate_scores{};
      candidate_scores.answer = select.answer;
      candidate_scores.candidates = arrays.candidates;
      candidate_scores.counts = arrays.counts;
      candidate_scores.capacity = shape.capacity;
      const TensorView batch_scores = leading_rows(scores, first, count);
      candidate_scores.scores = batch_scores.ptr<float>();
      candidate_scores.scores_stride = batch_scores.stride[0];
      if (Status status = to_status(fused::launch_candidate_scores(candidate_scores, count, stream),
                                    op, "candidate scores kernel launch");
          !status.ok()) {
        return status;
      }
    }
    if (falls_back) {
      if (Status status =
              run_fallback(op, form, shape, slab, out, scores, first, count, arrays.fallback_lo,
                           arrays.fallback_hi, arrays.fallback_rows, sorted, stream);
          !status.ok()) {
        return status;
      }
    }
  }
  return Status::Ok();
}

}  // namespace

size_t fused_indexer_workspace_size(int64_t batch_rows, int64_t width, int k,
                                    const FusedConfig& config) {
  const FusedShape shape(width, k, config.capacity > 0 ? config.capacity : default_capacity(k));
  const size_t logits = static_cast<size_t>(batch_rows * slab_pitch(width)) * sizeof(float);
  return topk_per_row_workspace_bound(k) + 3 * kSlabAlignment +
         align_slab(shape.kept_bytes(batch_rows)) +
         align_slab(std::max(shape.overlay_bytes(batch_rows), logits));
}

Status fused_indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, int k, bool sorted,
                             const RunOptions& options, const FusedConfig& config,
                             const TensorView& scores, const CandidateOutput& source) {
  PrefillConversion conversion;
  const PrefillForm form{q, keys, weights, ks, ke, is_mxfp4(q) ? &conversion : nullptr};
  if (Status status = run_fused("indexer_prefill", form, out, scores, source, q.values.shape[0],
                                keys.values.shape[0], 1, k, sorted, options, config);
      !status.ok() || !conversion.skipped) {
    return status;
  }
  // The workspace cannot hold the preconverted MXFP4 operands beside the fused arrays: the dense
  // path, which converts on chip then (the same answer).
  return dense_indexer_prefill(out, q, keys, weights, ks, ke, k, sorted, {scores, source}, options);
}

Status fused_indexer_decode(const TensorView& out, const QuantizedTensor& q,
                            const PagedKCache& cache, const TensorView& weights,
                            const TensorView& context_lens, const TensorView& block_table, int k,
                            bool sorted, const RunOptions& options, const FusedConfig& config,
                            const TensorView& scores, const CandidateOutput& source) {
  const int next_n = static_cast<int>(q.values.shape[1]);
  const DecodeForm form{q, cache, weights, context_lens, block_table, next_n};
  return run_fused("indexer_decode", form, out, scores, source, q.values.shape[0] * next_n,
                   block_table.shape[1] * cache.page_size, next_n, k, sorted, options, config);
}

}  // namespace flashindexer::cuda
