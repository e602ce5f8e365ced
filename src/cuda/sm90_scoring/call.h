// SPDX-License-Identifier: Apache-2.0
// A scoring call planned but not launched: what mqa_logits / paged_mqa_logits do, in two steps,
// so that the fused indexer can narrow the tile walk (TileFilter) and launch the kernel with its
// own epilogue between them. Host code of the CUDA backend.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/sm90_scoring/params.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {
namespace scoring {

struct KeysE4M3;       // format_e4m3.cuh
struct StoreEpilogue;  // store_epilogue.cuh

// One instantiation of the scoring kernel per (H, N = rows per Q tile x H, paged), epilogue and
// keys' format; defined in kernel.cuh, instantiated by the instantiations/*.cu files (the storing
// epilogue; sparse_*.cu the sparse formats) and the fused indexer's (the emitting one).
template <int kHeads, int kN, bool kPaged, typename Epilogue, typename Format = KeysE4M3>
cudaError_t launch_score(const ScoreMaps& maps, const ScoreParams& params,
                         const typename Epilogue::Params& epilogue, int grid, cudaStream_t stream);

// The MXFP4 instantiations (format_mxfp4.cuh, format_mxfp4_registers.cuh): the storing epilogue
// (instantiations/*_mxfp4.cu) and, for decode, the fused indexer's emitting one
// (sm90_fused/instantiations/*_emit_mxfp4.cu). The fused prefill scan scores preconverted
// operands with the FP8 kernel: the converting format's producer warps are the emitters' warps.
template <int kHeads, int kN, bool kPaged, typename Epilogue>
cudaError_t launch_score_mxfp4(const ScoreMaps& maps, const ScoreParams& params,
                               const typename Epilogue::Params& epilogue, const Mxfp4Params& format,
                               int grid, cudaStream_t stream);

// The sparse FP8 instantiations (format_sparse.cuh), storing epilogue only: N = H, blocks of
// kBlock keys gathered from the packed workspace or the paged cache at `source`.
template <int kHeads, int kBlock, bool kPagedSource>
cudaError_t launch_score_sparse(const ScoreMaps& maps, const ScoreParams& params,
                                const SparseKeyAddresses& source, int grid, cudaStream_t stream);

// The sparse MXFP4 instantiations (format_mxfp4_sparse.cuh), storing epilogue only: N = H,
// blocks of kBlock keys from the packed workspace or the paged cache, in the arithmetic of the
// converting format (kConverterBits) or of the register format.
template <int kHeads, int kBlock, bool kPagedSource, bool kConverterBits>
cudaError_t launch_score_sparse_mxfp4(const ScoreMaps& maps, const ScoreParams& params,
                                      const Mxfp4Params& format, int grid, cudaStream_t stream);

// Recomputes, exactly and from the raw bytes, every NaN logit in the visible ranges of a scored
// MXFP4 call: those of out-of-span vectors (format_mxfp4.cuh).
// `sms`: the device's SMs (the grid is a few CTAs each).
cudaError_t launch_mxfp4_fixup(const ScoreParams& params, const Mxfp4Fixup& operands, bool paged,
                               int sms, cudaStream_t stream);
// The device's sticky out-of-span flag (Mxfp4Params::out_of_span) on the current device; nullptr
// when the runtime cannot give its address.
int* mxfp4_out_of_span_flag();

template <int kHeads_, int kN_, bool kPaged_>
struct Shape {
  static constexpr int kHeads = kHeads_;
  static constexpr int kN = kN_;
  static constexpr bool kPaged = kPaged_;
};

// The instantiation a call was planned for.
struct KernelShape {
  int heads = 64;
  int columns = 256;  // N
  bool paged = false;
};

// Calls visit(Shape<H, N, paged>{}) for the instantiation of `shape`: the set of instantiations,
// listed once. Prefill: 256 (row, head) columns per Q tile (4 rows at H = 64, 8 at H = 32).
// Decode: next_n x H at H = 64; at H = 32 one row is N = 32 (at N = 64, as a tile of two rows
// with one dropped, decode at 64 x 32768 keys took 82 us against 80, batch 1 x 131072 9.1
// against 8.3), and three rows use a tile of four (N = 128), the fourth computed and dropped.
template <typename Visit>
auto visit_shape(const KernelShape& shape, Visit&& visit) {
  if (!shape.paged) {
    return shape.heads == 64 ? visit(Shape<64, 256, false>{}) : visit(Shape<32, 256, false>{});
  }
  if (shape.heads == 64) {
    switch (shape.columns) {
      case 64:
        return visit(Shape<64, 64, true>{});
      case 128:
        return visit(Shape<64, 128, true>{});
      case 192:
        return visit(Shape<64, 192, true>{});
      default:
        return visit(Shape<64, 256, true>{});
    }
  }
  switch (shape.columns) {
    case 32:
      return visit(Shape<32, 32, true>{});
    case 64:
      return visit(Shape<32, 64, true>{});
    default:
      return visit(Shape<32, 128, true>{});
  }
}

struct ScoringCall {
  ScoreMaps maps{};
  ScoreParams params;  // with its TileFilter: every tile (the fused indexer narrows it)
  KernelShape kernel;
  int sms = 0;  // SMs the work plan was made for: one persistent CTA each, at most one per item
  bool paged = false;
  // MXFP4 operands: the MXFP4 instantiations (format), then, when `fixup_after`, the exact
  // fix-up of the stored logits (launch_scoring). An FP8 call over preconverted MXFP4 operands
  // keeps the raw ones' fix-up too (fixup_after without mxfp4); a call whose logits are not laid
  // out by key (the fused indexer's sample) clears it.
  bool mxfp4 = false;
  bool fixup_after = false;
  Mxfp4Params format;
  Mxfp4Fixup fixup;
};

// The CTAs of a planned call: one per work item, at most one per SM (0: no work).
int scoring_grid(const ScoringCall& call);

// Launches a planned call's kernel with epilogue `Epilogue` (no work: nothing); not the fix-up
// (launch_scoring). MXFP4 prefill has storing instantiations only.
template <typename Epilogue>
cudaError_t launch_planned(const ScoringCall& call, const typename Epilogue::Params& epilogue,
                           cudaStream_t stream) {
  const int grid = scoring_grid(call);
  if (grid == 0) return cudaSuccess;
  return visit_shape(call.kernel, [&](auto shape) {
    using S = decltype(shape);
    if (!call.mxfp4) {
      return launch_score<S::kHeads, S::kN, S::kPaged, Epilogue>(call.maps, call.params, epilogue,
                                                                 grid, stream);
    }
    if constexpr (S::kPaged || std::is_same_v<Epilogue, StoreEpilogue>) {
      return launch_score_mxfp4<S::kHeads, S::kN, S::kPaged, Epilogue>(
          call.maps, call.params, epilogue, call.format, grid, stream);
    } else {
      return cudaErrorNotSupported;
    }
  });
}

// Writes -inf at the columns of each row outside its visible range (clean logits).
cudaError_t launch_fill_invisible(const ScoreParams& params, bool paged, cudaStream_t stream);

}  // namespace scoring

// The checks, tensor maps and work plan of mqa_logits / paged_mqa_logits (same arguments; the
// logits view gives the width, and the pointer and row stride the kernel stores to).
Status plan_mqa_logits(const char* op, const TensorView& logits, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights, const TensorView& ks,
                       const TensorView& ke, scoring::ScoringCall* call);
Status plan_paged_mqa_logits(const char* op, const TensorView& logits, const QuantizedTensor& q,
                             const PagedKCache& cache, const TensorView& weights,
                             const TensorView& context_lens, const TensorView& block_table,
                             scoring::ScoringCall* call);
// Launches a planned call with the storing epilogue, then the clean fill (-inf outside each
// row's range) when asked.
Status launch_scoring(const char* op, const scoring::ScoringCall& call, bool clean, void* stream);
// A planned MXFP4 prefill call's operands as e4m3 (mxfp4_preconvert.cu): what the converting
// kernel computes with, in `workspace` (mqa_logits_workspace_size bytes, cuda_ops.h).
// keys_ready: as cuda::mqa_logits's (cuda_ops.h), may be null. keys_flagged (optional, device):
// set to 1 when a key vector is out of span, else 0 (written when the keys are converted).
struct PreconvertedOperands {
  QuantizedTensor q;
  QuantizedTensor keys;
  TensorView weights;
};
Status preconvert_mxfp4_operands(const char* op, const scoring::ScoringCall& call,
                                 const QuantizedTensor& q, const QuantizedTensor& keys,
                                 void* workspace, size_t workspace_bytes, bool* keys_ready,
                                 int* keys_flagged, void* stream, PreconvertedOperands* out);
// The operands of q's rows over `keys` as preconvert_mxfp4_operands converts them, for the MXFP4
// mqa_logits call of those rows it plans first (`logits` only shapes that plan: nothing is written
// there): a row batch's conversion.
Status preconvert_mxfp4_rows(const char* op, const TensorView& logits, const QuantizedTensor& q,
                             const QuantizedTensor& keys, const TensorView& weights,
                             const TensorView& ks, const TensorView& ke, void* workspace,
                             size_t workspace_bytes, bool* keys_ready, int* keys_flagged,
                             void* stream, PreconvertedOperands* out);
// The FP8 call over the MXFP4 call's preconverted operands, into `logits` with ranges ks / ke,
// with the MXFP4 call's fix-up after it (fixup_after): the converting kernel's logits.
Status plan_preconverted(const char* op, const scoring::ScoringCall& call,
                         const PreconvertedOperands& operands, const TensorView& logits,
                         const TensorView& ks, const TensorView& ke, scoring::ScoringCall* fp8);
// Launches a planned MXFP4 mqa_logits call through the FP8 kernel: its operands converted into
// `workspace` (mqa_logits_workspace_size bytes, cuda_ops.h), the FP8 call over them, then the
// MXFP4 call's fix-up (mxfp4_preconvert.cu). The logits have the converting kernel's bits.
// keys_ready: as cuda::mqa_logits's (cuda_ops.h), may be null.
Status launch_mqa_logits_preconverted(const char* op, const scoring::ScoringCall& call,
                                      const TensorView& logits, const QuantizedTensor& q,
                                      const QuantizedTensor& keys, const TensorView& ks,
                                      const TensorView& ke, bool clean, void* workspace,
                                      size_t workspace_bytes, bool* keys_ready, void* stream);

}  // namespace flashindexer::cuda
