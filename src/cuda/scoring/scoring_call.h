// A scoring call planned but not launched: what mqa_logits / paged_mqa_logits do, in two steps,
// so that the fused indexer can set the sampling and emission fields of ScoreParams between
// them. Host code only.
#pragma once

#include "cuda/scoring/score_launch.h"
#include "flashindexer/kcache.h"
#include "flashindexer/logits.h"
#include "flashindexer/status.h"
#include "flashindexer/tensor.h"

namespace flashindexer::cuda {

namespace scoring {
struct ScoringCall {
  ScoreMaps maps{};
  ScoreParams params;
  Launcher launcher = nullptr;       // stores logits (or the sample)
  Launcher emit_launcher = nullptr;  // emits candidates (params.gate set)
  int sms = 0;  // SMs the work plan was made for: one persistent CTA each, at most one per item
  bool paged = false;
};
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

// Launches a planned call, then the clean fill (-inf outside each row's range) when asked.
Status launch_scoring(const char* op, const scoring::ScoringCall& call, bool clean, void* stream);

}  // namespace flashindexer::cuda
