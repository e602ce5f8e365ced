// SPDX-License-Identifier: Apache-2.0
// DCP candidates: pack one rank's local top-k as 64-bit rank keys, merge the gathered keys of
// all ranks. Both reuse the rank keys and the exact selector of src/cpu/topk/select.h, so the
// merge selects under exactly the order topk_per_row uses (docs/design.md, "Multi-GPU").
#include <omp.h>

#include <cstdint>
#include <cstring>

#include "cpu/cpu_ops.h"
#include "cpu/elements.h"
#include "cpu/topk/select.h"

namespace flashindexer::cpu {
namespace {

float logit_at(const TensorView& logits, int64_t row, int64_t column) {
  if (logits.dtype == DType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(*element<uint16_t>(logits, row, column)) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }
  return *element<float>(logits, row, column);
}

// Candidate j of rank r in row t of a [rows, N k] or [rows, N, k] view.
const uint64_t* candidate_block(const TensorView& gathered, int64_t row, int rank, int k) {
  if (gathered.rank == 3) return element<uint64_t>(gathered, row, rank, 0);
  return element<uint64_t>(gathered, row, static_cast<int64_t>(rank) * k);
}

}  // namespace

void dcp_pack_candidates(const TensorView& candidates, const TensorView& logits,
                         const TensorView& local_topk, const TensorView& row_starts, int k,
                         int rank, const DcpGroup& group, int threads) {
  const int64_t rows = logits.shape[0];
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t row_start = row_starts.defined() ? *element<int32_t>(row_starts, t) : 0;
    const int32_t* local = element<int32_t>(local_topk, t, 0);
    uint64_t* packed = element<uint64_t>(candidates, t, 0);
    for (int i = 0; i < k; ++i) {
      if (local[i] < 0) {
        packed[i] = 0;  // below every real candidate: even a NaN key has a nonzero ~id half
        continue;
      }
      const int64_t global_id = dcp_global(local[i], rank, group);
      packed[i] = rank_key_of_score(logit_at(logits, t, row_start + local[i]),
                                    static_cast<uint32_t>(global_id));
    }
  }
}

void dcp_pack_candidates_from_scores(const TensorView& candidates, const TensorView& scores,
                                     const TensorView& local_topk, int k, int rank,
                                     const DcpGroup& group, int threads) {
  const int64_t rows = scores.shape[0];
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t* local = element<int32_t>(local_topk, t, 0);
    const float* score = element<float>(scores, t, 0);
    uint64_t* packed = element<uint64_t>(candidates, t, 0);
    for (int i = 0; i < k; ++i) {
      packed[i] = local[i] < 0
                      ? 0
                      : rank_key_of_score(score[i],
                                          static_cast<uint32_t>(dcp_global(local[i], rank, group)));
    }
  }
}

size_t dcp_merge_thread_workspace_bytes(int ranks, int k) {
  return static_cast<size_t>(ranks) * static_cast<size_t>(k) * sizeof(uint64_t);
}

void dcp_merge_topk(const TensorView& out, const TensorView& gathered, int k, int ranks,
                    bool sorted, int threads, void* workspace) {
  const int64_t rows = out.shape[0];
  const size_t per_thread = static_cast<size_t>(ranks) * k;
#pragma omp parallel num_threads(threads)
  {
    uint64_t* keys = static_cast<uint64_t*>(workspace) + per_thread * omp_get_thread_num();
#pragma omp for schedule(static)
    for (int64_t t = 0; t < rows; ++t) {
      // Empty slots (key 0) are dropped, so a row with n < k real candidates returns n ids and
      // k - n times -1, like topk_per_row on a row of n visible keys.
      size_t count = 0;
      for (int r = 0; r < ranks; ++r) {
        const uint64_t* block = candidate_block(gathered, t, r, k);
        for (int i = 0; i < k; ++i) {
          keys[count] = block[i];
          count += block[i] != 0;
        }
      }
      const size_t kept = cpu::keep_largest(keys, count, static_cast<size_t>(k), sorted);
      cpu::write_indices(element<int32_t>(out, t, 0), keys, kept, k, sorted);
    }
  }
}

}  // namespace flashindexer::cpu
