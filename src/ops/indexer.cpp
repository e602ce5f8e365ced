// Public indexer entry points: validate, then run on the tensors' device.
#include "flashindexer/indexer.h"

#include <vector>

#include "ops/dispatch.h"
#include "ops/scoring_checks.h"
#include "ops/topk_checks.h"

namespace flashindexer {
namespace {

// Runs `body(workspace)` with the caller's workspace, or with one allocated for this call.
template <typename Body>
Status with_cpu_workspace(const char* op, int k, int threads, const RunOptions& options,
                          Body body) {
  const size_t needed = indexer_cpu_workspace_size(k, threads);
  if (options.workspace == nullptr) {
    std::vector<uint64_t> owned((needed + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    body(owned.data());
    return Status::Ok();
  }
  if (options.workspace_bytes < needed) {
    return Status::WorkspaceTooSmall(concat(op, ": workspace has ", options.workspace_bytes,
                                            " bytes, expected at least ", needed, " for k=", k,
                                            " on ", threads, " threads"));
  }
  body(options.workspace);
  return Status::Ok();
}

}  // namespace

size_t indexer_cpu_workspace_size(int k, int threads) {
  return static_cast<size_t>(cpu::resolve_threads(threads)) * cpu::indexer_thread_workspace_bytes(k);
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q,
                       const QuantizedTensor& keys, const TensorView& weights,
                       const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options, const RunOptions& options) {
  ArgCheck check("indexer_prefill");
  const ScoringDims dims = check_prefill_scoring(check, q, keys, weights, ks, ke, -1);
  check_topk_output(check, out, dims.rows, k);
  check.on_device("out", out, q.values.device);
  if (!check.ok()) return check.status();
  if (out.device == Device::kCUDA) return not_on_cuda(check.op());
  const int threads = cpu_threads(options);
  return with_cpu_workspace(check.op(), k, threads, options, [&](void* workspace) {
    cpu::indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted, workspace,
                         threads);
  });
}

Status indexer_decode(const TensorView& out, const QuantizedTensor& q, const PagedKCache& cache,
                      const TensorView& weights, const TensorView& context_lens,
                      const TensorView& block_table, int k, const TopKOptions& topk_options,
                      const RunOptions& options) {
  ArgCheck check("indexer_decode");
  const ScoringDims dims =
      check_paged_scoring(check, q, cache, weights, context_lens, block_table, -1);
  check_topk_output(check, out, dims.rows, k);
  check.on_device("out", out, q.values.device);
  if (!check.ok()) return check.status();
  if (out.device == Device::kCUDA) return not_on_cuda(check.op());
  const int threads = cpu_threads(options);
  return with_cpu_workspace(check.op(), k, threads, options, [&](void* workspace) {
    cpu::indexer_decode(out, q, cache, weights, context_lens, block_table, k, topk_options.sorted,
                        workspace, threads);
  });
}

}  // namespace flashindexer
