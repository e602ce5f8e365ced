// SPDX-License-Identifier: Apache-2.0
// candidate_scores_kernel: the fused indexer's selected scores, from the candidates the select
// chose among (candidate_scores.h).
//
// One CTA of 512 threads per row. The answer's indices (at most k <= 4096) go into an
// open-addressing table in shared memory (index -> answer slot, twice k entries or more, so
// probes stay short); then every candidate of the row (at most the 16384 slots) looks its index
// up and, when it was selected, writes its score to that slot. A row's candidates have distinct
// indices (each key is emitted once), so every slot is written once; the answer's order (best
// first or ascending index) does not matter. Table: 2 x 4 bytes x 8192 entries = 64 KiB at k =
// 4096, 32 KiB at k <= 2048.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/sm90_fused/candidate_scores.h"
#include "cuda/topk/keys.cuh"
#include "flashindexer/topk.h"

namespace flashindexer::cuda::fused {
namespace {

constexpr int kThreads = 512;
constexpr int32_t kEmptyEntry = -1;

// Table entries for k answers: a power of two >= 2 k.
int table_entries(int k) { return 2 * topk::selection_capacity(k > 1 ? k : 1); }

__device__ __forceinline__ uint32_t table_slot(int32_t index, uint32_t mask) {
  return (static_cast<uint32_t>(index) * 0x9E3779B1u >> 7) & mask;
}

// The fp32 bits a score key came from (number_key's inverse); key 0 is NaN's.
__device__ __forceinline__ float score_of_key(uint32_t key) {
  const uint32_t bits = key == 0 ? 0x7fffffffu : (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  return __uint_as_float(bits);
}

__global__ void __launch_bounds__(kThreads)
    candidate_scores_kernel(const __grid_constant__ CandidateScoresParams s, int entries) {
  extern __shared__ int32_t table[];  // [entries] indices, then [entries] answer slots
  int32_t* slots = table + entries;
  ptx::wait_prior_grids();  // launched as a programmatic dependent (launch.h)
  const topk::Params& p = s.answer;
  const int64_t row = blockIdx.x;
  int64_t row_start;
  int64_t row_count;
  topk::row_range(p, row, row_start, row_count);
  const int32_t raw = s.counts[row];
  const uint32_t count = raw > 0 ? static_cast<uint32_t>(raw) : 0u;
  if (raw > s.capacity || count < topk::selected_count(row_count, p.k)) return;  // the fallback's
  const uint32_t mask = static_cast<uint32_t>(entries - 1);
  for (int e = threadIdx.x; e < entries; e += kThreads) table[e] = kEmptyEntry;
  __syncthreads();
  const int32_t* answer = p.out + row * p.out_stride0;
  float* scores = s.scores + row * s.scores_stride;
  for (int i = threadIdx.x; i < p.k; i += kThreads) {
    const int32_t index = answer[i * p.out_stride1];
    if (index < 0) {
      scores[i] = -INFINITY;
      continue;
    }
    for (uint32_t e = table_slot(index, mask);; e = (e + 1) & mask) {
      const int32_t held = atomicCAS(&table[e], kEmptyEntry, index);
      if (held == kEmptyEntry || held == index) {
        slots[e] = i;
        break;
      }
    }
  }
  __syncthreads();
  const uint64_t* keys = s.candidates + row * s.capacity;
  for (uint32_t j = threadIdx.x; j < count; j += kThreads) {
    const uint64_t key = keys[j];
    const int32_t index = rank_key_index(key);
    for (uint32_t e = table_slot(index, mask);; e = (e + 1) & mask) {
      const int32_t held = table[e];
      if (held == kEmptyEntry) break;  // not selected
      if (held == index) {
        scores[slots[e]] = score_of_key(static_cast<uint32_t>(key >> 32));
        break;
      }
    }
  }
}

}  // namespace

cudaError_t launch_candidate_scores(const CandidateScoresParams& params, int64_t rows,
                                    cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (params.answer.k < 1 || params.answer.k > kMaxTopK) return cudaErrorInvalidValue;
  const int entries = table_entries(params.answer.k);
  const size_t shared = 2 * static_cast<size_t>(entries) * sizeof(int32_t);
  const cudaError_t configured =
      cudaFuncSetAttribute(candidate_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(2 * table_entries(kMaxTopK) * sizeof(int32_t)));
  if (configured != cudaSuccess) return configured;
  return launch_dependent(candidate_scores_kernel, dim3(static_cast<unsigned>(rows)),
                          dim3(kThreads), shared, stream, 0, params, entries);
}

}  // namespace flashindexer::cuda::fused
