// SPDX-License-Identifier: Apache-2.0
// Tensor views and run options: the only data types that cross the public API.
//
// A TensorView does not own memory. Shapes and strides are in elements of its dtype; for the
// packed FP4 dtype (kE2M1x2) one element is one byte holding two E2M1 values, so a row of
// D values has D/2 elements.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace flashindexer {

enum class DType : uint8_t {
  kF32,     // IEEE binary32
  kBF16,    // bfloat16 (upper half of binary32)
  kE4M3,    // FP8 e4m3fn: bias 7, no infinities, max 448, 0x7f/0xff are NaN
  kE2M1x2,  // two MXFP4 E2M1 values per byte: low nibble = even element
  kUE8M0,   // power-of-two scale byte: value 2^(byte - 127)
  kI32,
  kI64,
  kU8,  // raw bytes (e.g. a page cache)
};

enum class Device : uint8_t { kCPU, kCUDA };

const char* dtype_name(DType dtype);
const char* device_name(Device device);
size_t dtype_size(DType dtype);

inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCPU;
  int rank = 0;  // 1..kMaxRank for a tensor; every op refuses a view of any other rank
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};  // in elements

  // A row-major contiguous view. More than kMaxRank extents give a view of that rank whose
  // extents are not kept, which every op refuses by name.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::kCPU);
  // The same view with its outer-dimension strides replaced (inner stride stays 1), e.g. a
  // logits buffer whose rows are padded: `logits.with_row_stride(row_stride)`.
  TensorView with_row_stride(int64_t row_stride) const;

  bool defined() const { return rank > 0; }
  // The dimensions the view holds: rank, within 0..kMaxRank.
  int held_rank() const { return rank < 0 ? 0 : (rank > kMaxRank ? kMaxRank : rank); }
  int64_t size(int dim) const { return shape[dim]; }
  int64_t numel() const;
  bool is_contiguous() const;
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
};

// Which implementation of the CUDA indexer runs (IndexerOptions::path in indexer.h, where the
// choice is explained): the dense path, the fused path, the library's choice, or (a consumer
// layer's call, IndexerOptions::candidates) the sparse path that scores only its candidate
// blocks' keys.
enum class IndexerPath { kAuto, kDense, kFused, kSparse };

// Execution settings shared by every op.
struct RunOptions {
  // cudaStream_t for ops on CUDA tensors; nullptr = the default stream. Ignored on the CPU.
  void* cuda_stream = nullptr;
  // Caller-owned scratch. When null, an op that needs scratch on the CPU allocates it per
  // call; when given, it must hold at least the op's *_workspace_size() bytes.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // CPU threads; 0 = the OpenMP default. Results never depend on this number.
  int cpu_threads = 0;
  // Deprecated, kept for one release: read only by the indexer overloads without IndexerOptions
  // (indexer.h), which take them as IndexerOptions::path and IndexerOptions::min_row_keys; every
  // other op ignores them. Not marked [[deprecated]]: GCC would then warn wherever a RunOptions
  // is copied, not only where these fields are used.
  IndexerPath indexer_path = IndexerPath::kAuto;
  int64_t min_row_keys = 0;
};

}  // namespace flashindexer
