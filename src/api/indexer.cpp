// Public indexer entry points: validate, then run on the tensors' device.
#include "flashindexer/indexer.h"

#include "api/dispatch.h"
#include "api/checks/scoring.h"
#include "api/checks/topk.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

namespace flashindexer {
size_t indexer_cpu_workspace_size(int k, int threads) {
  return cpu::indexer_slots(cpu::resolve_threads(threads)) * cpu::indexer_thread_workspace_bytes(k);
}

IndexerPath cuda_prefill_path(int k, const RunOptions& options, int64_t num_keys) {
  if (options.indexer_path != IndexerPath::kAuto) return options.indexer_path;
  const int64_t shortest = options.min_row_keys;
  const bool several = shortest > 0 && num_keys / kSeveralRequestsRatio >= shortest;
  return k <= kFusedMaxAutoK && shortest >= fused_min_row_keys(k, several) ? IndexerPath::kFused
                                                                         : IndexerPath::kDense;
}

size_t indexer_cuda_workspace_size(int k) {
#ifdef FLASHINDEXER_WITH_CUDA
  return cuda::indexer_workspace_size(k);
#else
  (void)k;
  return 0;
#endif
}

Status indexer_prefill(const TensorView& out, const QuantizedTensor& q, const QuantizedTensor& keys,
                       const TensorView& weights, const TensorView& ks, const TensorView& ke, int k,
                       const TopKOptions& topk_options, const RunOptions& options) {
  ArgCheck check("indexer_prefill");
  const ScoringDims dims = check_prefill_scoring(check, q, keys, weights, ks, ke, -1);
  check_topk_output(check, out, dims.rows, k);
  check.on_device("out", out, q.values.device);
  check.require(options.min_row_keys >= 0,
                concat("options.min_row_keys is ", options.min_row_keys,
                       "; expected >= 0 (the fewest keys a row sees, 0 when unknown)"));
  if (!check.ok()) return check.status();
  if (out.device == Device::kCUDA) {
#ifdef FLASHINDEXER_WITH_CUDA
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    RunOptions chosen = options;
    chosen.indexer_path = cuda_prefill_path(k, options, keys.values.shape[0]);
    return cuda::indexer_prefill(out, q, keys, weights, ks, ke, k, topk_options.sorted, chosen);
#else
    return not_on_cuda(check.op());
#endif
  }
  const int threads = cpu_threads(options);
  return with_cpu_workspace(check.op(), indexer_cpu_workspace_size(k, threads), options,
                            [&](void* workspace) {
                              cpu::indexer_prefill(out, q, keys, weights, ks, ke, k,
                                                   topk_options.sorted, workspace, threads);
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
  if (out.device == Device::kCUDA) {
#ifdef FLASHINDEXER_WITH_CUDA
    if (Status status = check_cuda_device(check.op()); !status.ok()) return status;
    return cuda::indexer_decode(out, q, cache, weights, context_lens, block_table, k,
                                topk_options.sorted, options);
#else
    return not_on_cuda(check.op());
#endif
  }
  const int threads = cpu_threads(options);
  return with_cpu_workspace(check.op(), indexer_cpu_workspace_size(k, threads), options,
                            [&](void* workspace) {
                              cpu::indexer_decode(out, q, cache, weights, context_lens, block_table,
                                                  k, topk_options.sorted, workspace, threads);
                            });
}

}  // namespace flashindexer
