// SPDX-License-Identifier: Apache-2.0
// gather_k_workspace on CUDA tensors (spec §4.6): every request's keys, read through its block
// table, copied into the packed workspace in request order.
//
// A pure copy of value_bytes + scale_bytes per key (132 FP8, 68 MXFP4 at D = 128). Each warp
// takes a tile of 32 consecutive workspace keys at a time (a grid-stride loop over tiles): lane l
// finds key l's source once (its request by a binary search of cu_seq_lens, L1-resident, so any
// mix of request lengths spreads evenly; its page through the block table) and copies that key's
// scale; then the warp copies the tile's values in chunks of 16 bytes (or 4, or 1 where the
// addresses allow no wider), consecutive lanes taking consecutive chunks, so a warp reads and
// writes whole 128-byte lines, each chunk's source taken from its key's lane by a shuffle and its
// workspace row from the key's index. What a key costs besides its bytes is paid once a key, not
// once a chunk: a lane copies the same part of its keys in every round when a key's chunks
// divide the warp (ChunkLanes), and divides by a FastDivisor (built on the host) otherwise. At
// 64K keys a warp copies one tile, so its instructions per chunk set the kernel's time. Four
// chunks a lane are loaded before any is stored. The grid is one wave of resident blocks (or fewer,
// from the workspace's host shape); the keys to copy come from cu_seq_lens[R] read on the device:
// graph-capturable, no sync.
//
// Nothing is read or written out of bounds whatever the device-side values: a key whose request
// offsets are not ordered, whose page index is past the block table's width, or whose page id is
// outside [0, num_pages) is not written, and keys at or past the workspace's end are not
// written (the CPU op rejects all of these).
#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/cuda_ops.h"
#include "cuda/quantize/fast_divide.h"
#include "cuda/quantize/lanes.cuh"

namespace flashindexer::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTileKeys = 32;       // keys per warp tile: one a lane
constexpr int kChunksInFlight = 4;  // chunk loads a lane issues before its stores
constexpr unsigned kAllLanes = 0xFFFFFFFFu;

struct GatherParams {
  const uint8_t* cache;
  int64_t page_stride;
  int page_size;
  int64_t scales_in_page;  // where a page's scales start: page_size * value_bytes
  quant::FastDivisor by_page_size;
  int64_t num_pages;
  int value_bytes;
  int chunks_per_key;  // value_bytes / the chunk
  quant::FastDivisor by_chunks_per_key;
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

// Where workspace key `key`'s values and scale are in the cache; values null when it has none
// (see the header comment).
struct KeySource {
  const uint8_t* values = nullptr;
  const uint8_t* scale = nullptr;
};

__device__ __forceinline__ KeySource source_key(const GatherParams& p, int64_t key) {
  KeySource none;
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
  if (request < 0 || request >= p.requests) return none;
  const int32_t begin = __ldg(p.cu_seq_lens + request);
  if (begin < 0 || key >= __ldg(p.cu_seq_lens + request + 1)) return none;
  // 0 <= j <= key < cu_seq_lens[R] < 2^31: the FastDivisor's range.
  const auto j = static_cast<uint32_t>(key - begin);
  const uint32_t column = p.by_page_size.quotient(j);
  if (column >= p.table_columns) return none;
  const int32_t page = __ldg(p.block_table + request * p.table_row_stride + column);
  if (page < 0 || page >= p.num_pages) return none;
  const uint64_t in_page = j - column * static_cast<uint32_t>(p.page_size);
  const uint8_t* start = p.cache + page * p.page_stride;
  return {start + in_page * static_cast<uint32_t>(p.value_bytes),
          start + p.scales_in_page + in_page * static_cast<uint32_t>(p.scale_bytes)};
}

// Which chunk of which key a lane copies in each round of a tile. When a key's chunks divide
// the warp (every D = 64 and D = 128 layout with 16- or 4-byte chunks), round c of lane l is
// part l % chunks_per_key of key c * (32 / chunks_per_key) + l / chunks_per_key: fixed per lane,
// so no chunk pays a division. Otherwise each chunk divides (whole_keys false).
struct ChunkLanes {
  bool whole_keys;
  uint32_t key;  // the lane's key in round 0, and its part of every key it copies
  uint32_t part;
  uint32_t keys_per_round;
};

__device__ __forceinline__ ChunkLanes chunk_lanes(const GatherParams& p, int lane) {
  ChunkLanes lanes{kTileKeys % p.chunks_per_key == 0, 0, 0, 0};
  if (lanes.whole_keys) {
    lanes.key = p.by_chunks_per_key.quotient(static_cast<uint32_t>(lane));
    lanes.part = static_cast<uint32_t>(lane) - lanes.key * static_cast<uint32_t>(p.chunks_per_key);
    lanes.keys_per_round = static_cast<uint32_t>(kTileKeys / p.chunks_per_key);
  }
  return lanes;
}

template <int kChunk, bool kScaleWord>
__global__ void __launch_bounds__(kThreads) gather_kernel(const GatherParams p) {
  using T = typename Chunk<kChunk>::Type;
  int64_t keys = __ldg(p.cu_seq_lens + p.requests);
  keys = keys < 0 ? 0 : (keys > p.workspace_keys ? p.workspace_keys : keys);
  const int64_t tiles = (keys + kTileKeys - 1) / kTileKeys;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const ChunkLanes lanes = chunk_lanes(p, lane);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (kThreads / 32);
  for (int64_t tile = static_cast<int64_t>(blockIdx.x) * (kThreads / 32) + threadIdx.x / 32;
       tile < tiles; tile += warps) {  // the warp's lanes loop together (the shuffles need all)
    const int64_t first_key = tile * kTileKeys;
    // The lane's own key: its source and its scale.
    const int64_t own_key = first_key + lane;
    const KeySource own = own_key < keys ? source_key(p, own_key) : KeySource{};
    const uint8_t* source = own.values;
    const uint8_t* scale_in = own.scale;
    uint32_t scale = 0;  // a 4-byte scale, loaded with the values
    if constexpr (kScaleWord) {
      if (source != nullptr) scale = __ldg(reinterpret_cast<const uint32_t*>(scale_in));
    }
    // The key's source, for the lanes copying its chunks (by shuffles).
    const auto source_bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(source));
    const auto source_low = static_cast<uint32_t>(source_bits);
    const auto source_high = static_cast<uint32_t>(source_bits >> 32);
    uint8_t* const tile_rows = p.values + first_key * p.values_row_bytes;
    // The tile's chunks: lane l takes chunks l, l + 32, ... of the tile's 32 * chunks_per_key.
    for (int first = 0; first < p.chunks_per_key; first += kChunksInFlight) {
      T chunk[kChunksInFlight];
      uint8_t* to[kChunksInFlight];
      bool copies[kChunksInFlight];
#pragma unroll
      for (int u = 0; u < kChunksInFlight; ++u) {
        // Straight-line shuffles for all four (a chunk past the key's last is chunk 0's again,
        // and not copied): no branch around them.
        const bool in_key = first + u < p.chunks_per_key;  // the same for the whole warp
        const int round = in_key ? first + u : 0;
        uint32_t key;
        uint32_t part;
        if (lanes.whole_keys) {  // the same for the whole launch
          key = lanes.key + static_cast<uint32_t>(round) * lanes.keys_per_round;
          part = lanes.part;
        } else {
          const auto item = static_cast<uint32_t>(round * kTileKeys + lane);
          key = p.by_chunks_per_key.quotient(item);
          part = item - key * static_cast<uint32_t>(p.chunks_per_key);
        }
        const uint64_t from_bits = static_cast<uint64_t>(__shfl_sync(kAllLanes, source_high, key))
                                       << 32 |
                                   __shfl_sync(kAllLanes, source_low, key);
        copies[u] = in_key && from_bits != 0;  // no source: the key is not written
        const auto* from = reinterpret_cast<const uint8_t*>(from_bits) + part * kChunk;
        if (copies[u]) chunk[u] = __ldcs(reinterpret_cast<const T*>(from));
        to[u] = tile_rows + key * p.values_row_bytes + part * kChunk;
      }
#pragma unroll
      for (int u = 0; u < kChunksInFlight; ++u) {
        if (copies[u]) *reinterpret_cast<T*>(to[u]) = chunk[u];
      }
    }
    if (source == nullptr) continue;
    uint8_t* scale_out = p.scales + own_key * p.scales_row_bytes;
    if constexpr (kScaleWord) {
      *reinterpret_cast<uint32_t*>(scale_out) = scale;
    } else {  // any number of bytes (MXFP4 has D/32), unaligned
      for (int b = 0; b < p.scale_bytes; ++b) scale_out[b] = __ldg(scale_in + b);
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
  p.by_page_size = quant::FastDivisor(static_cast<uint32_t>(cache.page_size));
  p.num_pages = cache.num_pages;
  p.value_bytes = static_cast<int>(cache.value_bytes_per_key());
  p.scales_in_page = static_cast<int64_t>(cache.page_size) * p.value_bytes;
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
  p.chunks_per_key = p.value_bytes / chunk;
  p.by_chunks_per_key = quant::FastDivisor(static_cast<uint32_t>(p.chunks_per_key));
  const int64_t tiles = (p.workspace_keys + kTileKeys - 1) / kTileKeys;
  const int64_t wanted = (tiles + kThreads / 32 - 1) / (kThreads / 32);
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
