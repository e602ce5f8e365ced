// SPDX-License-Identifier: Apache-2.0
// gather_k_workspace on CUDA tensors (spec §4.6): every request's keys, read through its block
// table, copied into the packed workspace in request order.
//
// A pure copy of value_bytes + scale_bytes per key (132 FP8, 68 MXFP4 at D = 128). The work is
// a grid-stride loop over (workspace key, 16-byte chunk of its values): consecutive threads copy
// consecutive chunks of consecutive keys, so a warp reads and writes whole 128-byte lines, and
// the key's first chunk also copies its scale. Each thread finds its key's request by a binary
// search of cu_seq_lens (L1-resident), so any mix of request lengths spreads evenly; two items
// per iteration keep two loads in flight per thread. The grid is one wave of resident blocks (or
// fewer, from the workspace's host shape); the keys to copy come from cu_seq_lens[R] read on the
// device: graph-capturable, no sync.
//
// Nothing is read or written out of bounds whatever the device-side values: a key whose request
// offsets are not ordered, whose page index is past the block table's width, or whose page id is
// outside [0, num_pages) is not written, and keys at or past the workspace's end are not
// written (the CPU op rejects all of these).
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/cuda_ops.h"
#include "cuda/quantize/lanes.cuh"

namespace flashindexer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kItemsPerIteration = 2;  // loads in flight per thread

struct GatherParams {
  const uint8_t* cache;
  int64_t page_stride;
  int page_size;
  int64_t num_pages;
  int value_bytes;
  int scale_bytes;
  const int32_t* block_table;
  int64_t table_row_stride;
  int64_t table_columns;
  const int32_t* cu_seq_lens;  // contiguous (checked)
  int requests;
  uint8_t* values;
  int64_t values_row_bytes;
  uint8_t* scales;
  int64_t scales_row_bytes;
  int64_t workspace_keys;
};

template <int kChunk>
struct Chunk;
template <>
struct Chunk<16> {
  using Type = uint4;
};
template <>
struct Chunk<4> {
  using Type = uint32_t;
};
template <>
struct Chunk<1> {
  using Type = uint8_t;
};

// The source key of workspace key `key`, or null when it has none (see the header comment).
__device__ __forceinline__ const uint8_t* source_key(const GatherParams& p, int64_t key,
                                                     int64_t* in_page) {
  int lo = 0;
  int hi = p.requests + 1;  // first r in [0, R] with cu[r] > key
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (__ldg(p.cu_seq_lens + mid) <= key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int request = lo - 1;
  if (request < 0 || request >= p.requests) return nullptr;
  const int64_t begin = __ldg(p.cu_seq_lens + request);
  if (key >= __ldg(p.cu_seq_lens + request + 1)) return nullptr;
  const int64_t j = key - begin;
  const int64_t column = quant::divide(j, p.page_size);
  if (column >= p.table_columns) return nullptr;
  const int32_t page = __ldg(p.block_table + request * p.table_row_stride + column);
  if (page < 0 || page >= p.num_pages) return nullptr;
  *in_page = j - column * p.page_size;
  return p.cache + page * p.page_stride;
}

template <int kChunk, bool kScaleWord>
__global__ void __launch_bounds__(kThreads) gather_kernel(const GatherParams p) {
  using T = typename Chunk<kChunk>::Type;
  const int chunks_per_key = p.value_bytes / kChunk;
  int64_t keys = __ldg(p.cu_seq_lens + p.requests);
  keys = keys < 0 ? 0 : (keys > p.workspace_keys ? p.workspace_keys : keys);
  const int64_t items = keys * chunks_per_key;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; first < items;
       first += stride * kItemsPerIteration) {
    T chunk[kItemsPerIteration];
    uint32_t scale[kItemsPerIteration];
    const uint8_t* page[kItemsPerIteration];
    int64_t key[kItemsPerIteration];
    int64_t in_page[kItemsPerIteration];
    int part[kItemsPerIteration];
#pragma unroll
    for (int u = 0; u < kItemsPerIteration; ++u) {
      const int64_t item = first + u * stride;
      page[u] = nullptr;
      if (item >= items) continue;
      key[u] = quant::divide(item, chunks_per_key);
      part[u] = static_cast<int>(item - key[u] * chunks_per_key);
      page[u] = source_key(p, key[u], &in_page[u]);
      if (page[u] == nullptr) continue;
      chunk[u] = __ldcs(
          reinterpret_cast<const T*>(page[u] + in_page[u] * p.value_bytes + part[u] * kChunk));
      if (part[u] == 0) {  // the key's first chunk also carries its scale, loaded here as well
        const uint8_t* scale_in = page[u] + static_cast<int64_t>(p.page_size) * p.value_bytes +
                                  in_page[u] * p.scale_bytes;
        if constexpr (kScaleWord) {
          scale[u] = __ldg(reinterpret_cast<const uint32_t*>(scale_in));
        } else {
          scale[u] = 0;
          for (int b = 0; b < p.scale_bytes; ++b)
            scale[u] |= static_cast<uint32_t>(__ldg(scale_in + b)) << (8 * b);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kItemsPerIteration; ++u) {
      if (page[u] == nullptr) continue;
      *reinterpret_cast<T*>(p.values + key[u] * p.values_row_bytes + part[u] * kChunk) = chunk[u];
      if (part[u] != 0) continue;
      uint8_t* scale_out = p.scales + key[u] * p.scales_row_bytes;
      if constexpr (kScaleWord) {
        *reinterpret_cast<uint32_t*>(scale_out) = scale[u];
      } else {
        for (int b = 0; b < p.scale_bytes; ++b)
          scale_out[b] = static_cast<uint8_t>(scale[u] >> (8 * b));
      }
    }
  }
}

// The grid: as many blocks as the GPU holds at once (a grid-stride loop with blocks waiting for
// a second wave would leave the first wave's SMs idle at the end), fewer for a small workspace.
template <int kChunk, bool kScaleWord>
void launch_kernel(const GatherParams& p, int64_t wanted_blocks, cudaStream_t stream) {
  static const int resident_per_sm = [] {
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, gather_kernel<kChunk, kScaleWord>,
                                                      kThreads, 0) != cudaSuccess ||
        blocks <= 0) {
      cudaGetLastError();
      blocks = 1;
    }
    return blocks;
  }();
  const int64_t cap = static_cast<int64_t>(resident_per_sm) * multiprocessor_count();
  const auto blocks = static_cast<unsigned>(wanted_blocks < cap ? wanted_blocks : cap);
  gather_kernel<kChunk, kScaleWord><<<blocks, kThreads, 0, stream>>>(p);
}

template <int kChunk>
void launch(const GatherParams& p, bool scale_word, int64_t wanted_blocks, cudaStream_t stream) {
  if (scale_word) {
    launch_kernel<kChunk, true>(p, wanted_blocks, stream);
  } else {
    launch_kernel<kChunk, false>(p, wanted_blocks, stream);
  }
}

}  // namespace

Status gather_k_workspace(const TensorView& values, const TensorView& scales,
                          const PagedKCache& cache, const TensorView& block_table,
                          const TensorView& cu_seq_lens, void* stream) {
  GatherParams p;
  p.cache = static_cast<const uint8_t*>(cache.data);
  p.page_stride = cache.page_stride_bytes;
  p.page_size = cache.page_size;
  p.num_pages = cache.num_pages;
  p.value_bytes = static_cast<int>(cache.value_bytes_per_key());
  p.scale_bytes = static_cast<int>(cache.scale_bytes_per_key());
  p.block_table = block_table.ptr<int32_t>();
  p.table_row_stride = block_table.stride[0];
  p.table_columns = block_table.shape[1];
  p.cu_seq_lens = cu_seq_lens.ptr<int32_t>();
  p.requests = static_cast<int>(block_table.shape[0]);
  p.values = values.ptr<uint8_t>();
  p.values_row_bytes = values.stride[0];
  p.scales = scales.ptr<uint8_t>();
  // FP8 scales are [Nws] f32 (4 bytes a key), MXFP4 scales [Nws, D/32] bytes.
  p.scales_row_bytes = scales.rank == 1 ? 4 * scales.stride[0] : scales.stride[0];
  p.workspace_keys = values.shape[0];
  if (p.workspace_keys == 0 || p.num_pages == 0) return Status::Ok();

  // The widest chunk every address allows: cache base, page stride, workspace base and rows.
  auto fits = [&](int64_t bytes) {
    return quant::aligned(cache.data, bytes) && p.page_stride % bytes == 0 &&
           quant::aligned(values.data, bytes) && p.values_row_bytes % bytes == 0 &&
           p.value_bytes % bytes == 0;
  };
  const int chunk = fits(16) ? 16 : (fits(4) ? 4 : 1);
  const bool scale_word = p.scale_bytes == 4 && quant::aligned(cache.data, 4) &&
                          quant::aligned(scales.data, 4) && p.scales_row_bytes % 4 == 0;
  const int64_t items = p.workspace_keys * (p.value_bytes / chunk);
  const int64_t wanted = (items + kThreads - 1) / kThreads;
  auto* cuda_stream = static_cast<cudaStream_t>(stream);
  if (chunk == 16) {
    launch<16>(p, scale_word, wanted, cuda_stream);
  } else if (chunk == 4) {
    launch<4>(p, scale_word, wanted, cuda_stream);
  } else {
    launch<1>(p, scale_word, wanted, cuda_stream);
  }
  return launch_status("gather_k_workspace");
}

}  // namespace flashindexer::cuda
