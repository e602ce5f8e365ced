// SPDX-License-Identifier: Apache-2.0
// Public indexer entry points: validate, then run on the tensors' device.
#include "flashindexer/indexer.h"

#include "api/checks/scoring.h"
#include "api/checks/topk.h"
#include "api/dispatch.h"
#include "api/sparse_consumer_rows.h"
#include "core/heuristics.h"
#include "cpu/candidates.h"
#include "cuda/candidates/candidates.h"
#include "cuda/cuda_ops.h"

namespace flashindexer {
namespace {

// The options the deprecated overloads read from RunOptions (they stay for one release).
IndexerOptions indexer_options_of(const RunOptions& options) {
  IndexerOptions indexer_options;
  indexer_options.path = options.indexer_path;
  indexer_options.min_row_keys = options.min_row_keys;
  return indexer_options;
}

// A consumer layer's candidate input: [rows, C] i32 on the call's device, 1 <= C <= 4096, and a
// block size of 1..4096 positions; the fused path is not a consumer.
void check_candidate_input(ArgCheck& check, const IndexerOptions& indexer_options, int64_t rows,
                           Device device) {
  const CandidateInput& input = indexer_options.candidates;
  check.require(indexer_options.path != IndexerPath::kSparse || input.defined(),
                "IndexerPath::kSparse scores a consumer layer's candidate blocks: it needs "
                "indexer_options.candidates");
  if (!input.defined()) return;
  check.tensor("indexer_options.candidates.blocks", input.blocks, {DType::kI32}, 2)
      .dim("indexer_options.candidates.blocks", input.blocks, 0, rows)
      .on_device("indexer_options.candidates.blocks", input.blocks, device);
  if (!check.ok()) return;
  check.require(input.blocks.shape[1] >= 1 && input.blocks.shape[1] <= kMaxCandidateBlocks,
                "indexer_options.candidates.blocks has ", input.blocks.shape[1],
                " candidate blocks per row, which is not supported: expected 1 <= C <= ",
                kMaxCandidateBlocks);
  check.require(input.block_size >= 1 && input.block_size <= 4096,
                "indexer_options.candidates.block_size=", input.block_size,
                " is not supported, expected 1 <= block_size <= 4096");
  check.require(indexer_options.path != IndexerPath::kSparse ||
                    (!input.vllm_compatible &&
                     (input.block_size == 8 || input.block_size == 16 || input.block_size == 32)),
                "IndexerPath::kSparse takes the exact consumer (not vllm_compatible) with a block "
                "size of 8, 16 or 32; got indexer_options.candidates.block_size=",
                input.block_size, input.vllm_compatible ? ", vllm_compatible" : "");
  check.require(device != Device::kCUDA || indexer_options.path != IndexerPath::kFused,
                "the fused path does not take candidates; pass IndexerPath::kAuto or kDense (a "
                "consumer call runs the dense path)");
  if (!check.ok() || !input.sparse_rows.defined()) return;
  // Prebuilt rows serve the sparse path only: the exact form with a sparse block size.
  check.require(!input.vllm_compatible &&
                    (input.block_size == 8 || input.block_size == 16 || input.block_size == 32),
                "indexer_options.candidates.sparse_rows is the sparse path's rows metadata: it "
                "takes the exact consumer (not vllm_compatible) with a block size of 8, 16 or 32");
  if (check.ok()) {
    check_sparse_rows_buffer(check, "indexer_options.candidates.sparse_rows", input.sparse_rows,
                             rows, input, device);
  }
}

// The optional outputs: scores [rows, >= k] f32 and a source layer's candidate blocks [rows, C]
// i32 (1 <= C <= 4096, 1 <= cb <= 4096), on the call's device.
void check_outputs(ArgCheck& check, const IndexerOptions& indexer_options, int64_t rows, int k,
                   Device device) {
  const TensorView& scores = indexer_options.scores;
  if (scores.defined()) {
    check.tensor("indexer_options.scores", scores, {DType::kF32}, 2)
        .dim("indexer_options.scores", scores, 0, rows)
        .dim_at_least("indexer_options.scores", scores, 1, k)
        .on_device("indexer_options.scores", scores, device);
    if (check.ok() && rows > 1) check.stride_at_least("indexer_options.scores", scores, 0, k);
  }
  const CandidateOutput& source = indexer_options.candidate_source;
  if (!source.defined()) return;
  check.tensor("indexer_options.candidate_source.blocks", source.blocks, {DType::kI32}, 2)
      .dim("indexer_options.candidate_source.blocks", source.blocks, 0, rows)
      .on_device("indexer_options.candidate_source.blocks", source.blocks, device);
  if (!check.ok()) return;
  const int64_t num_blocks = source.blocks.shape[1];
  check.require(num_blocks >= 1 && num_blocks <= kMaxCandidateBlocks,
                "indexer_options.candidate_source.blocks has ", num_blocks,
                " candidate blocks per row, which is not supported: expected 1 <= C <= ",
                kMaxCandidateBlocks);
  check.require(source.block_size >= 1 && source.block_size <= 4096,
                "indexer_options.candidate_source.block_size=", source.block_size,
                " is not supported, expected 1 <= block_size <= 4096");
  if (check.ok() && rows > 1) {
    check.stride_at_least("indexer_options.candidate_source.blocks", source.blocks, 0, num_blocks);
  }
}

// Whether the fused path can publish these candidate blocks: its scan folds scores into blocks
// by aligned groups of 8 keys (sm90_fused/block_max.cuh).
bool fused_publishes_blocks(const CandidateOutput& source) { return source.block_size % 8 == 0; }

// Combinations no path serves, refused before any work: kUnsupported naming the options.
Status check_output_combinations(const char* op, const IndexerOptions& indexer_options,
                                 Device device) {
  const bool source = indexer_options.candidate_source.defined();
  if (source && indexer_options.candidates.defined()) {
    return Status::Unsupported(
        concat(op,
               ": indexer_options.candidates and indexer_options.candidate_source together "
               "(a layer both consumer and source) is not a DeepSeek-V4.1 layer and is not "
               "supported; pass one of them"));
  }
  if (indexer_options.scores.defined() && indexer_options.candidates.defined() &&
      indexer_options.candidates.vllm_compatible) {
    return Status::Unsupported(
        concat(op,
               ": indexer_options.scores with indexer_options.candidates.vllm_compatible is "
               "not supported (that selection ranks masked scores, not the logits); use the "
               "exact consumer (vllm_compatible = false)"));
  }
  if (source && device == Device::kCUDA && indexer_options.path == IndexerPath::kFused &&
      !fused_publishes_blocks(indexer_options.candidate_source)) {
    return Status::Unsupported(
        concat(op,
               ": the fused path publishes candidate blocks of a multiple of 8 positions; got "
               "indexer_options.candidate_source.block_size=",
               indexer_options.candidate_source.block_size, "; pass IndexerPath::kAuto or kDense"));
  }
  return Status::Ok();
}

// What both indexer ops check after their scoring operands: the top-k output, the candidate
// input, the optional outputs and how they combine.
Status check_indexer_call(ArgCheck& check, const TensorView& out,
                          const IndexerOptions& indexer_options, int64_t rows, int k,
                          Device device) {
  check_topk_output(check, out, rows, k);
  check.on_device("out", out, device);
  check_candidate_input(check, indexer_options, rows, device);
  check_outputs(check, indexer_options, rows, k, device);
  if (!check.ok()) return check.status();
  return check_output_combinations(check.op(), indexer_options, device);
}

cuda::IndexerOutputs cuda_outputs(const IndexerOptions& indexer_options) {
  return {indexer_options.scores, indexer_options.candidate_source};
}

// indexer_prefill; `min_row_keys_name` names the argument min_row_keys came in, for the message.
Status prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
               const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
               const TopKOptions& topk_options, const IndexerOptions& indexer_options,
               const char* min_row_keys_name, const RunOptions& options) {
  ArgCheck check("indexer_prefill");
  const ScoringDims dims = check_prefill_scoring(check, q, keys, weights, ks, ke, -1);
  check.require(indexer_options.min_row_keys >= 0, min_row_keys_name, " is ",
                indexer_options.min_row_keys,
                "; expected >= 0 (the fewest keys a row sees, 0 when unknown)");
  if (Status status =
          check_indexer_call(check, out, indexer_options, dims.rows, k, q.values.device);
      !status.ok()) {
    return status;
  }
  const CandidateInput& candidates = indexer_options.candidates;
  const TensorView& scores = indexer_options.scores;
  const int threads = cpu_threads(options);
  if (candidates.defined()) {
    if (out.device == Device::kCUDA) {
      if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
      return cuda::candidate_indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted,
                                             candidates, indexer_options.path, options, scores);
    }
    cpu::candidate_indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted,
                                   candidates, threads);
    if (scores.defined())
      cpu::selected_scores_prefill(scores, out, q, keys, weights, ks, k, threads);
    return Status::Ok();
  }
  if (out.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted,
                                 cuda_prefill_path(k, indexer_options, keys.values.shape[0]),
                                 cuda_outputs(indexer_options), options);
  }
  return with_cpu_workspace(
      check.op(), indexer_cpu_workspace_size(k, threads), options, [&](void* workspace) {
        cpu::indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted,
                             indexer_options.candidate_source, workspace, threads);
        if (scores.defined()) {
          cpu::selected_scores_prefill(scores, out, q, keys, weights, ks, k, threads);
        }
      });
}

}  // namespace

size_t indexer_cpu_workspace_size(int k, int threads) {
  return cpu::indexer_slots(cpu::resolve_threads(threads)) * cpu::indexer_thread_workspace_bytes(k);
}

IndexerPath cuda_prefill_path(int k, const IndexerOptions& indexer_options, int64_t num_keys) {
  if (indexer_options.path != IndexerPath::kAuto) return indexer_options.path;
  // The fused path publishes blocks of a multiple of 8 positions only.
  if (indexer_options.candidate_source.defined() &&
      !fused_publishes_blocks(indexer_options.candidate_source)) {
    return IndexerPath::kDense;
  }
  return heuristics::prefill_takes_fused(k, indexer_options.min_row_keys, num_keys)
             ? IndexerPath::kFused
             : IndexerPath::kDense;
}

IndexerPath cuda_prefill_path(int k, const RunOptions& options, int64_t num_keys) {
  return cuda_prefill_path(k, indexer_options_of(options), num_keys);
}

size_t indexer_cuda_workspace_size(int k) { return cuda::indexer_workspace_size(k); }

size_t indexer_cuda_workspace_size(int k, const IndexerOptions& indexer_options) {
  const CandidateOutput& source = indexer_options.candidate_source;
  if (!source.defined() || source.blocks.rank != 2) return cuda::indexer_workspace_size(k);
  return cuda::indexer_workspace_size(k, static_cast<int>(source.blocks.shape[1]),
                                      source.block_size);
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options, const IndexerOptions& indexer_options,
                       const RunOptions& options) {
  return prefill(out, q, keys, weights, ks, ke, k, topk_options, indexer_options,
                 "indexer_options.min_row_keys", options);
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options, const RunOptions& options) {
  return prefill(out, q, keys, weights, ks, ke, k, topk_options, indexer_options_of(options),
                 "options.min_row_keys", options);
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options,
                      const IndexerOptions& indexer_options, const RunOptions& options) {
  ArgCheck check("indexer_decode");
  const ScoringDims dims =
      check_paged_scoring(check, q, cache, weights, context_lens, block_table, -1);
  if (Status status =
          check_indexer_call(check, out, indexer_options, dims.rows, k, q.values.device);
      !status.ok()) {
    return status;
  }
  const CandidateInput& candidates = indexer_options.candidates;
  const TensorView& scores = indexer_options.scores;
  const int threads = cpu_threads(options);
  if (candidates.defined()) {
    if (out.device == Device::kCUDA) {
      if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
      return cuda::candidate_indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                            topk_options.sorted, candidates, indexer_options.path,
                                            options, scores);
    }
    cpu::candidate_indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                  topk_options.sorted, candidates, threads);
    if (scores.defined()) {
      cpu::selected_scores_decode(scores, out, q, cache, weights, block_table, k, threads);
    }
    return Status::Ok();
  }
  if (out.device == Device::kCUDA) {
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                topk_options.sorted, indexer_options.path,
                                cuda_outputs(indexer_options), options);
  }
  return with_cpu_workspace(
      check.op(), indexer_cpu_workspace_size(k, threads), options, [&](void* workspace) {
        cpu::indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                            topk_options.sorted, indexer_options.candidate_source, workspace,
                            threads);
        if (scores.defined()) {
          cpu::selected_scores_decode(scores, out, q, cache, weights, block_table, k, threads);
        }
      });
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options,
                      const RunOptions& options) {
  return indexer_decode(out, q, cache, weights, context_lens, block_table, k, topk_options,
                        indexer_options_of(options), options);
}

}  // namespace flashindexer
