// SPDX-License-Identifier: Apache-2.0
// The indexer's optional scores output (IndexerOptions::scores) on CUDA: what each path runs
// after its selection, while the selected keys' scores are still in its workspace. Host code of
// the CUDA backend (selected_scores.cu; the fused path's form in sm90_fused/candidate_scores.h).
#pragma once

#include <cstdint>

#include "cuda/candidates/rows.cuh"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"
#include "flashindexer/topk.h"

namespace flashindexer::cuda {

// What becomes of a row with no visible key: its scores are written (k x -inf), or left alone
// (the fused fallback owns only the rows it gives a range; the select's rows are written before).
enum class EmptyScoreRows { kWrite, kLeave };

// scores [rows, >= k] f32 (out) from out [rows, >= k] i32 (the answers just selected from
// `logits`, [rows, width] f32 with a row stride): scores[t, i] = logits[t, start + out[t, i]],
// start being the row's visible start under `ranges` (the top-k's clamp, topk/keys.cuh), and
// -inf where out[t, i] < 0. A gather of k floats a row; no logits are written.
Status gather_selected_scores(const TensorView& scores, const TensorView& out,
                              const TensorView& logits, const RowRanges& ranges, int k,
                              EmptyScoreRows empty_rows, void* stream);

// The same with the row starts of the candidate kernels' bounds (a consumer call's rows, whose
// answers are positions from candidates::visible_of's start).
Status gather_selected_scores(const TensorView& scores, const TensorView& out,
                              const TensorView& logits, const candidates::BoundRows& bounds, int k,
                              void* stream);

}  // namespace flashindexer::cuda
