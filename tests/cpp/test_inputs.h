// Shared test inputs: seeded randomness, owning host tensors, quantized operand builders,
// paged K cache builders and the comparison helpers every test file uses.
//
// Every randomized test starts with FI_SEEDED_RNG(rng): the seed is drawn fresh from
// std::random_device (or read from the environment variable FLASHINDEXER_TEST_SEED) and is
// printed with every failure of that test, so any failure can be replayed exactly.
//
// The builders quantize with the reference (src/reference) so that a test of one public op
// does not depend on the correctness of another; the quantizer tests prove the public
// quantizers equal the reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "reference/reference.h"

namespace fitest {

using namespace flashindexer;  // NOLINT(google-build-using-namespace): tests only

// ---------------------------------------------------------------------------------------------
// Seeds

inline uint64_t test_seed() {
  if (const char* env = std::getenv("FLASHINDEXER_TEST_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 0);
  }
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  // Uniform integer in [lo, hi] (both inclusive).
  int64_t uniform_int(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(engine_);
  }
  float normal(float sigma = 1.0f) { return std::normal_distribution<float>(0.0f, sigma)(engine_); }
  bool bernoulli(double p) { return std::bernoulli_distribution(p)(engine_); }
  uint32_t bits32() { return static_cast<uint32_t>(engine_()); }
  template <typename T>
  void shuffle(std::vector<T>& items) {
    std::shuffle(items.begin(), items.end(), engine_);
  }
  template <typename T>
  const T& pick(const std::vector<T>& items) {
    return items[static_cast<size_t>(uniform_int(0, static_cast<int64_t>(items.size()) - 1))];
  }

 private:
  std::mt19937_64 engine_;
};

// Declares `Rng rng` seeded freshly and attaches the seed to every failure in the scope.
#define FI_SEEDED_RNG(rng)                                                                        \
  const uint64_t rng##_seed = ::fitest::test_seed();                                              \
  SCOPED_TRACE(::testing::Message() << "random seed " << rng##_seed                               \
                                    << " (replay: FLASHINDEXER_TEST_SEED=" << rng##_seed << ")"); \
  ::fitest::Rng rng(rng##_seed)

// ---------------------------------------------------------------------------------------------
// Bits

inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  return bits;
}
inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr int32_t kPoisonIndex = 0x5A5A5A5A;        // never a valid top-k output
inline constexpr uint32_t kPoisonLogitBits = 0x7FA5A5A5u;  // a NaN no op would produce
inline constexpr uint8_t kPoisonByte = 0xCD;

// ---------------------------------------------------------------------------------------------
// Owning host tensors

// A host buffer together with its TensorView. Move-only, so the view never dangles.
// `row_stride` (elements, 0 = contiguous) replaces the stride of dimension rank-2; outer
// dimensions follow contiguously from it, as TensorView::with_row_stride defines.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_stride = 0) {
    view_.dtype = dtype;
    view_.device = Device::kCPU;
    view_.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = view_.rank - 1; d >= 0; --d) {
      view_.shape[d] = shape[d];
      view_.stride[d] = stride;
      stride *= shape[d];
    }
    if (row_stride > 0 && view_.rank >= 2) {
      view_.stride[view_.rank - 2] = row_stride;
      for (int d = view_.rank - 3; d >= 0; --d) {
        view_.stride[d] = view_.stride[d + 1] * view_.shape[d + 1];
      }
    }
    const int64_t elements = view_.rank == 0 ? 0 : view_.shape[0] * view_.stride[0];
    byte_size_ = static_cast<size_t>(std::max<int64_t>(elements, 0)) * dtype_size(dtype);
    storage_.assign(byte_size_ / 8 + 1, 0);
    view_.data = storage_.data();
  }
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;
  HostTensor(HostTensor&&) = default;
  HostTensor& operator=(HostTensor&&) = default;

  const TensorView& view() const { return view_; }
  template <typename T>
  T* data() const {
    return static_cast<T*>(view_.data);
  }
  uint8_t* bytes() const { return static_cast<uint8_t*>(view_.data); }
  size_t byte_size() const { return byte_size_; }
  int64_t size(int dim) const { return view_.shape[dim]; }
  int64_t stride(int dim) const { return view_.stride[dim]; }
  void fill_bytes(uint8_t byte) { std::memset(view_.data, byte, byte_size_); }
  template <typename T>
  void fill(T value) {
    T* p = data<T>();
    for (size_t i = 0; i < byte_size_ / sizeof(T); ++i) p[i] = value;
  }
  // Element at a multi-index, honouring the strides.
  template <typename T>
  T& at(std::initializer_list<int64_t> index) const {
    int64_t offset = 0;
    int dim = 0;
    for (int64_t i : index) offset += i * view_.stride[dim++];
    return data<T>()[offset];
  }

 private:
  std::vector<uint64_t> storage_;
  size_t byte_size_ = 0;
  TensorView view_;
};

inline HostTensor i32_tensor(const std::vector<int32_t>& values) {
  HostTensor t(DType::kI32, {static_cast<int64_t>(values.size())});
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

// A view of `data` with the given dtype and shape, row-major contiguous.
inline TensorView view_of(void* data, DType dtype, std::initializer_list<int64_t> shape) {
  return TensorView::contiguous(data, dtype, shape);
}

// ---------------------------------------------------------------------------------------------
// Random real inputs

// Gaussian values with one random magnitude per row (2^[-4, 4]), like real keys / heads.
inline std::vector<float> random_rows(Rng& rng, int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float sigma = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-4, 4)));
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = rng.normal(sigma);
  }
  return x;
}

// ---------------------------------------------------------------------------------------------
// Quantized operands (built with the reference quantizers)

// values + scales of one quantized operand; scales undefined for FP8 queries.
struct Operand {
  HostTensor values;
  HostTensor scales;
  QuantizedTensor view() const { return {values.view(), scales.view()}; }
};

inline int64_t value_bytes_per_row(KFormat format, int head_dim) {
  return format == KFormat::kFP8 ? head_dim : head_dim / 2;
}
inline int64_t scale_bytes_per_row(KFormat format, int head_dim) {
  return format == KFormat::kFP8 ? 4 : head_dim / kMxfp4BlockSize;
}

inline std::vector<int64_t> with_last(std::vector<int64_t> lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

// Quantizes rows of `x` (rows x head_dim) with the reference quantizers.
//   FP8:   values [lead..., D] e4m3 and, when `with_scales`, scales [lead...] f32.
//   MXFP4: values [lead..., D/2] e2m1x2 and scales [lead..., D/32] ue8m0.
inline Operand quantize_rows(KFormat format, const std::vector<float>& x,
                             const std::vector<int64_t>& lead, int head_dim, bool with_scales) {
  int64_t rows = 1;
  for (int64_t extent : lead) rows *= extent;
  Operand op;
  if (format == KFormat::kFP8) {
    op.values = HostTensor(DType::kE4M3, with_last(lead, head_dim));
    std::vector<float> scales(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      reference::quantize_fp8_row(op.values.bytes() + r * head_dim, &scales[r],
                                  x.data() + r * head_dim, head_dim);
    }
    if (with_scales) {
      op.scales = HostTensor(DType::kF32, lead);
      std::copy(scales.begin(), scales.end(), op.scales.data<float>());
    }
  } else {
    op.values = HostTensor(DType::kE2M1x2, with_last(lead, head_dim / 2));
    op.scales = HostTensor(DType::kUE8M0, with_last(lead, head_dim / kMxfp4BlockSize));
    for (int64_t r = 0; r < rows; ++r) {
      reference::quantize_mxfp4_row(op.values.bytes() + r * head_dim / 2,
                                    op.scales.bytes() + r * head_dim / kMxfp4BlockSize,
                                    x.data() + r * head_dim, head_dim);
    }
  }
  return op;
}

// Keys [n, D] (+ scales) of random rows.
inline Operand make_keys(Rng& rng, KFormat format, int64_t n, int head_dim) {
  return quantize_rows(format, random_rows(rng, n, head_dim), {n}, head_dim, true);
}

// Query heads [lead..., H, D]; FP8 queries carry no scales (folded into the weights).
inline Operand make_query(Rng& rng, KFormat format, std::vector<int64_t> lead_with_heads,
                          int head_dim) {
  int64_t rows = 1;
  for (int64_t extent : lead_with_heads) rows *= extent;
  return quantize_rows(format, random_rows(rng, rows, head_dim), lead_with_heads, head_dim,
                       format == KFormat::kMXFP4);
}

// Weights [rows, H] f32, uniform in [-1, 1] (negative weights are part of the contract).
inline HostTensor make_weights(Rng& rng, int64_t rows, int heads) {
  HostTensor w(DType::kF32, {rows, heads});
  for (int64_t i = 0; i < rows * heads; ++i)
    w.data<float>()[i] = static_cast<float>(rng.uniform(-1, 1));
  return w;
}

// Copies row `from` of an operand of keys [n, ...] over row `to` (duplicate keys => ties).
inline void copy_key_row(Operand& keys, KFormat format, int head_dim, int64_t from, int64_t to) {
  const int64_t vb = value_bytes_per_row(format, head_dim);
  std::memcpy(keys.values.bytes() + to * vb, keys.values.bytes() + from * vb, vb);
  const int64_t sb = scale_bytes_per_row(format, head_dim);
  std::memcpy(keys.scales.bytes() + to * sb, keys.scales.bytes() + from * sb, sb);
}

// ---------------------------------------------------------------------------------------------
// Operand kinds and logit rows shared by the test files

// One kind of scoring operand: its format, head count and head dimension.
struct OperandCase {
  KFormat format;
  int heads;
  int head_dim;
};
// Both formats, both head counts, both head dimensions, in four combinations.
inline constexpr OperandCase kOperandCases[] = {{KFormat::kFP8, 32, 128},
                                                {KFormat::kFP8, 64, 64},
                                                {KFormat::kMXFP4, 64, 128},
                                                {KFormat::kMXFP4, 32, 64}};

inline std::string describe(const OperandCase& c) {
  return std::string(kformat_name(c.format)) + " H=" + std::to_string(c.heads) +
         " D=" + std::to_string(c.head_dim);
}

// How a row of logits is filled.
enum class Fill {
  kRandom,   // continuous values: ties only by accident
  kFewTies,  // four distinct values: heavy ties at the k-th value
  kSpecial,  // NaNs of both signs and any payload, +-inf, +-0 mixed with numbers
};

inline float random_nan(Rng& rng) {
  const uint32_t sign = rng.bernoulli(0.5) ? 0x80000000u : 0u;
  return bits_float(sign | 0x7F800000u | (1u + rng.bits32() % 0x7FFFFFu));
}

inline float random_logit(Rng& rng, Fill fill) {
  switch (fill) {
    case Fill::kRandom:
      return rng.normal(10.0f);
    case Fill::kFewTies:
      return static_cast<float>(rng.uniform_int(0, 3)) - 1.0f;
    case Fill::kSpecial: {
      const double u = rng.uniform(0, 1);
      if (u < 0.12) return random_nan(rng);
      if (u < 0.17) return kInf;
      if (u < 0.25) return -kInf;
      if (u < 0.30) return 0.0f;
      if (u < 0.35) return -0.0f;
      return static_cast<float>(rng.uniform_int(-3, 3));
    }
  }
  return 0.0f;
}


// ---------------------------------------------------------------------------------------------
// Prefill problems

struct PrefillProblem {
  KFormat format = KFormat::kFP8;
  int heads = 32;
  int head_dim = 128;
  int64_t rows = 0;
  int64_t num_keys = 0;
  Operand q;           // [M, H, D(/2)]
  Operand keys;        // [N, D(/2)] + scales
  HostTensor weights;  // [M, H] f32
  HostTensor ks;       // [M] i32
  HostTensor ke;       // [M] i32
};

// Random row ranges inside [0, num_keys): the first rows are the edge cases (empty at 0, empty
// at the end, full, length 1, odd start), the rest random.
inline void fill_row_ranges(Rng& rng, HostTensor& ks, HostTensor& ke, int64_t rows,
                            int64_t num_keys) {
  for (int64_t t = 0; t < rows; ++t) {
    int64_t start = rng.uniform_int(0, num_keys);
    int64_t end = rng.uniform_int(start, num_keys);
    switch (t) {
      case 0:
        start = end = 0;
        break;
      case 1:
        start = end = num_keys;
        break;
      case 2:
        start = 0;
        end = num_keys;
        break;
      case 3:
        start = std::min<int64_t>(num_keys, 3);
        end = std::min<int64_t>(num_keys, start + 1);
        break;
      case 4:
        start = std::min<int64_t>(num_keys, 1);
        end = num_keys;
        break;
      default:
        break;
    }
    ks.data<int32_t>()[t] = static_cast<int32_t>(start);
    ke.data<int32_t>()[t] = static_cast<int32_t>(end);
  }
}

inline PrefillProblem make_prefill_problem(Rng& rng, KFormat format, int64_t rows, int64_t num_keys,
                                           int heads, int head_dim) {
  PrefillProblem p;
  p.format = format;
  p.heads = heads;
  p.head_dim = head_dim;
  p.rows = rows;
  p.num_keys = num_keys;
  p.q = make_query(rng, format, {rows, heads}, head_dim);
  p.keys = make_keys(rng, format, num_keys, head_dim);
  p.weights = make_weights(rng, rows, heads);
  p.ks = HostTensor(DType::kI32, {rows});
  p.ke = HostTensor(DType::kI32, {rows});
  fill_row_ranges(rng, p.ks, p.ke, rows, num_keys);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Paged K cache

// An owning paged cache, every byte poisoned at construction. Move-only.
class CacheBuffer {
 public:
  CacheBuffer() = default;
  CacheBuffer(KFormat format, int64_t num_pages, int page_size, int head_dim,
              int64_t page_stride_bytes, uint8_t poison = kPoisonByte) {
    bytes_.assign(static_cast<size_t>(num_pages * page_stride_bytes) + 16, poison);
    cache_.data = bytes_.data();
    cache_.device = Device::kCPU;
    cache_.format = format;
    cache_.num_pages = num_pages;
    cache_.page_size = page_size;
    cache_.head_dim = head_dim;
    cache_.page_stride_bytes = page_stride_bytes;
  }
  CacheBuffer(const CacheBuffer&) = delete;
  CacheBuffer& operator=(const CacheBuffer&) = delete;
  CacheBuffer(CacheBuffer&&) = default;
  CacheBuffer& operator=(CacheBuffer&&) = default;

  const PagedKCache& cache() const { return cache_; }
  PagedKCache& cache() { return cache_; }
  uint8_t* base() { return bytes_.data(); }
  int64_t total_bytes() const { return cache_.num_pages * cache_.page_stride_bytes; }
  int64_t value_bytes() const { return value_bytes_per_row(cache_.format, cache_.head_dim); }
  int64_t scale_bytes() const { return scale_bytes_per_row(cache_.format, cache_.head_dim); }
  // Byte offsets of a slot's values and scales (spec §4.2 / §4.3), computed independently
  // of the library.
  int64_t values_offset(int64_t slot) const {
    return (slot / cache_.page_size) * cache_.page_stride_bytes +
           (slot % cache_.page_size) * value_bytes();
  }
  int64_t scales_offset(int64_t slot) const {
    return (slot / cache_.page_size) * cache_.page_stride_bytes + cache_.page_size * value_bytes() +
           (slot % cache_.page_size) * scale_bytes();
  }
  // Writes row `row` of a quantized keys operand into `slot`.
  void write_slot(int64_t slot, const Operand& keys, int64_t row) {
    std::memcpy(bytes_.data() + values_offset(slot), keys.values.bytes() + row * value_bytes(),
                value_bytes());
    std::memcpy(bytes_.data() + scales_offset(slot), keys.scales.bytes() + row * scale_bytes(),
                scale_bytes());
  }

 private:
  std::vector<uint8_t> bytes_;
  PagedKCache cache_;
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Decode problems: q [B, next_n, H, D], a shuffled paged cache holding every request's keys,
// context lengths in the 1-D ([B]) or 2-D ([B, next_n]) form.
struct DecodeConfig {
  KFormat format = KFormat::kFP8;
  int batch = 3;
  int next_n = 1;
  int heads = 32;
  int head_dim = 128;
  int page_size = 64;
  bool two_dim_lens = false;
  int64_t max_len = 300;         // context lengths drawn from [0, max_len]
  int64_t spare_pages = 3;       // pages no request uses
  int64_t stride_pad_bytes = 0;  // page stride = page bytes + this (multiple of 4)
};

struct DecodeProblem {
  DecodeConfig config;
  int64_t width = 0;                  // logits columns
  std::vector<int64_t> stored;        // keys stored per request (its longest visible length)
  std::vector<int64_t> ends;          // visible end per row, as the header defines it
  std::vector<Operand> request_keys;  // per request: keys [stored_b, D] in context order
  Operand q;                          // [B, next_n, H, D(/2)]
  HostTensor weights;                 // [B * next_n, H]
  HostTensor context_lens;            // [B] or [B, next_n] i32
  HostTensor block_table;             // [B, P] i32
  CacheBuffer cache;
  int64_t rows() const { return static_cast<int64_t>(config.batch) * config.next_n; }
};

// Fills the context lengths (the first request gets the extreme cases) and derives per-row ends.
inline DecodeProblem make_decode_problem(Rng& rng, const DecodeConfig& config,
                                         const std::vector<int32_t>& forced_lens = {}) {
  DecodeProblem p;
  p.config = config;
  const int B = config.batch;
  const int n = config.next_n;
  p.stored.assign(B, 0);
  p.ends.assign(static_cast<size_t>(B) * n, 0);
  std::vector<int32_t> lens;
  if (config.two_dim_lens) {
    p.context_lens = HostTensor(DType::kI32, {B, n});
  } else {
    p.context_lens = HostTensor(DType::kI32, {B});
  }
  const int64_t count = config.two_dim_lens ? int64_t{B} * n : B;
  for (int64_t i = 0; i < count; ++i) {
    int32_t len = static_cast<int32_t>(rng.uniform_int(0, config.max_len));
    if (i < static_cast<int64_t>(forced_lens.size())) len = forced_lens[i];
    p.context_lens.data<int32_t>()[i] = len;
  }
  for (int b = 0; b < B; ++b) {
    for (int j = 0; j < n; ++j) {
      int64_t end;
      if (config.two_dim_lens) {
        end = p.context_lens.data<int32_t>()[b * n + j];
      } else {
        end = static_cast<int64_t>(p.context_lens.data<int32_t>()[b]) - n + j + 1;
      }
      end = std::max<int64_t>(end, 0);
      p.ends[b * n + j] = end;
      p.stored[b] = std::max(p.stored[b], end);
    }
  }
  p.width = *std::max_element(p.stored.begin(), p.stored.end()) + rng.uniform_int(0, 5);
  p.width = std::max<int64_t>(p.width, 1);

  // Pages: each request needs ceil(stored / page_size); all pages shuffled.
  int64_t max_pages = 1;
  int64_t used_pages = 0;
  for (int b = 0; b < B; ++b) {
    const int64_t pages = ceil_div(p.stored[b], config.page_size);
    used_pages += pages;
    max_pages = std::max(max_pages, pages);
  }
  const int64_t num_pages = used_pages + config.spare_pages;
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  rng.shuffle(page_ids);
  const int64_t table_columns = max_pages + 1;
  p.block_table = HostTensor(DType::kI32, {B, table_columns});
  // Columns past a request's pages hold some valid page (what engines leave there).
  for (int64_t i = 0; i < B * table_columns; ++i) {
    p.block_table.data<int32_t>()[i] = static_cast<int32_t>(rng.uniform_int(0, num_pages - 1));
  }
  const int64_t page_bytes =
      config.page_size * (value_bytes_per_row(config.format, config.head_dim) +
                          scale_bytes_per_row(config.format, config.head_dim));
  p.cache = CacheBuffer(config.format, num_pages, config.page_size, config.head_dim,
                        page_bytes + config.stride_pad_bytes);
  size_t next_page = 0;
  for (int b = 0; b < B; ++b) {
    p.request_keys.push_back(make_keys(rng, config.format, p.stored[b], config.head_dim));
    const int64_t pages = ceil_div(p.stored[b], config.page_size);
    for (int64_t c = 0; c < pages; ++c) p.block_table.at<int32_t>({b, c}) = page_ids[next_page++];
    for (int64_t s = 0; s < p.stored[b]; ++s) {
      const int64_t page = p.block_table.at<int32_t>({b, s / config.page_size});
      p.cache.write_slot(page * config.page_size + s % config.page_size, p.request_keys[b], s);
    }
  }
  p.q = make_query(rng, config.format, {B, n, config.heads}, config.head_dim);
  p.weights = make_weights(rng, p.rows(), config.heads);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Comparisons

inline std::string status_text(const Status& status) {
  return std::string(status_code_name(status.code())) + ": " + status.message();
}

#define FI_ASSERT_OK(expr)                                                                \
  do {                                                                                    \
    const ::flashindexer::Status fi_status_ = (expr);                                     \
    ASSERT_TRUE(fi_status_.ok()) << #expr << " -> " << ::fitest::status_text(fi_status_); \
  } while (0)

#define FI_EXPECT_OK(expr)                                                                \
  do {                                                                                    \
    const ::flashindexer::Status fi_status_ = (expr);                                     \
    EXPECT_TRUE(fi_status_.ok()) << #expr << " -> " << ::fitest::status_text(fi_status_); \
  } while (0)

// A rejected call: the expected code and a message naming every one of `names`.
inline ::testing::AssertionResult IsRejected(const Status& status, StatusCode code,
                                             std::initializer_list<const char*> names) {
  if (status.ok()) return ::testing::AssertionFailure() << "the call succeeded";
  if (status.code() != code) {
    return ::testing::AssertionFailure()
           << "code " << status_code_name(status.code()) << ", expected " << status_code_name(code)
           << " (message: \"" << status.message() << "\")";
  }
  for (const char* name : names) {
    if (status.message().find(name) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << status.message() << "\" does not name \"" << name << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// A rejected call whose message names at least one of `names` (for conditions that involve
// two arguments, e.g. a visible length beyond the logits width).
inline ::testing::AssertionResult IsRejectedNamingAnyOf(const Status& status,
                                                        std::initializer_list<StatusCode> codes,
                                                        std::initializer_list<const char*> names) {
  if (status.ok()) return ::testing::AssertionFailure() << "the call succeeded";
  if (std::find(codes.begin(), codes.end(), status.code()) == codes.end()) {
    return ::testing::AssertionFailure() << "unexpected code " << status_code_name(status.code())
                                         << " (message: \"" << status.message() << "\")";
  }
  for (const char* name : names) {
    if (status.message().find(name) != std::string::npos) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" names none of the expected arguments";
}

// The derived error bound of one logit against its exact fp64 value (reference::score_tolerance):
// fp32 rounding everywhere; `tensor_cores` adds the FP8 wgmma accumulation of the CUDA kernel.
inline double logit_tolerance(int head_dim, int heads, double magnitude,
                              bool tensor_cores = false) {
  return flashindexer::reference::score_tolerance(magnitude, head_dim, heads, tensor_cores);
}

// Row r of an i32 [rows, >= k] output as a vector of its first k entries.
inline std::vector<int32_t> topk_row(const HostTensor& out, int64_t row, int k) {
  std::vector<int32_t> result(static_cast<size_t>(k));
  for (int i = 0; i < k; ++i) result[i] = out.at<int32_t>({row, i});
  return result;
}

// Checks one row of a top-k result against the reference row (sorted best first, -1 tail):
// a valid prefix of the same length, then -1; the same set; the same order when `sorted`, else
// ascending indices (the unsorted order of every backend).
inline ::testing::AssertionResult TopKRowMatches(const std::vector<int32_t>& got,
                                                 const std::vector<int32_t>& expected,
                                                 bool sorted) {
  const size_t k = expected.size();
  size_t valid = 0;
  while (valid < k && expected[valid] >= 0) ++valid;
  for (size_t i = 0; i < k; ++i) {
    if (i < valid && got[i] < 0) {
      return ::testing::AssertionFailure()
             << "slot " << i << " is " << got[i] << " but " << valid << " keys are visible";
    }
    if (i >= valid && got[i] != -1) {
      return ::testing::AssertionFailure()
             << "slot " << i << " is " << got[i] << ", expected the -1 padding (valid prefix "
             << valid << ")";
    }
  }
  std::vector<int32_t> got_set(got.begin(), got.begin() + valid);
  std::vector<int32_t> expected_set(expected.begin(), expected.begin() + valid);
  if (sorted) {
    for (size_t i = 0; i < valid; ++i) {
      if (got[i] != expected[i]) {
        return ::testing::AssertionFailure()
               << "sorted slot " << i << " is " << got[i] << ", expected " << expected[i];
      }
    }
    return ::testing::AssertionSuccess();
  }
  for (size_t i = 1; i < valid; ++i) {
    if (got[i - 1] >= got[i]) {
      return ::testing::AssertionFailure() << "unsorted slots " << i - 1 << " and " << i << " are "
                                           << got[i - 1] << ", " << got[i]
                                           << ": not in ascending index order";
    }
  }
  std::sort(got_set.begin(), got_set.end());
  std::sort(expected_set.begin(), expected_set.end());
  if (std::adjacent_find(got_set.begin(), got_set.end()) != got_set.end()) {
    return ::testing::AssertionFailure() << "duplicate index in the valid prefix";
  }
  if (got_set != expected_set) {
    std::vector<int32_t> missing;
    std::set_difference(expected_set.begin(), expected_set.end(), got_set.begin(), got_set.end(),
                        std::back_inserter(missing));
    std::vector<int32_t> extra;
    std::set_difference(got_set.begin(), got_set.end(), expected_set.begin(), expected_set.end(),
                        std::back_inserter(extra));
    auto failure = ::testing::AssertionFailure();
    failure << missing.size() << " expected indices missing (first";
    for (size_t i = 0; i < std::min<size_t>(missing.size(), 5); ++i) failure << " " << missing[i];
    failure << "), " << extra.size() << " unexpected (first";
    for (size_t i = 0; i < std::min<size_t>(extra.size(), 5); ++i) failure << " " << extra[i];
    return failure << ")";
  }
  return ::testing::AssertionSuccess();
}

// Columns [k, row stride) of every row of an i32 output still hold kPoisonIndex.
inline ::testing::AssertionResult ColumnsBeyondKUntouched(const HostTensor& out, int k) {
  const int64_t row_stride = out.stride(0);
  for (int64_t r = 0; r < out.size(0); ++r) {
    for (int64_t c = k; c < row_stride; ++c) {
      const int32_t v = out.data<int32_t>()[r * row_stride + c];
      if (v != kPoisonIndex) {
        return ::testing::AssertionFailure()
               << "row " << r << " column " << c << " (>= k=" << k << ") was written: " << v;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Every row of `got` against `expected` (both [rows, >= k]): the same sets, the same order
// when sorted; columns >= k of `got` untouched.
inline ::testing::AssertionResult SameTopK(const HostTensor& got, const HostTensor& expected, int k,
                                    bool sorted) {
  for (int64_t r = 0; r < got.size(0); ++r) {
    ::testing::AssertionResult row =
        TopKRowMatches(topk_row(got, r, k), topk_row(expected, r, k), sorted);
    if (!row) return ::testing::AssertionFailure() << "row " << r << ": " << row.message();
  }
  return ColumnsBeyondKUntouched(got, k);
}

// Duplicated keys (exact ties) and all-zero keys (scores exactly 0, ties across rows).
inline void add_ties(Rng& rng, Operand& keys, const OperandCase& c, int64_t num_keys) {
  for (int64_t i = 0; i < num_keys / 4; ++i) {
    copy_key_row(keys, c.format, c.head_dim, rng.uniform_int(0, num_keys - 1),
                 rng.uniform_int(0, num_keys - 1));
  }
  const int64_t vb = value_bytes_per_row(c.format, c.head_dim);
  for (int i = 0; i < 5; ++i) {
    std::memset(keys.values.bytes() + rng.uniform_int(0, num_keys - 1) * vb, 0, vb);
  }
}

// A poisoned i32 top-k output [rows, cols] with the given row stride.
inline HostTensor poisoned_topk_output(int64_t rows, int64_t cols, int64_t row_stride = 0) {
  HostTensor out(DType::kI32, {rows, cols}, row_stride);
  out.fill<int32_t>(kPoisonIndex);
  return out;
}

// A poisoned f32 logits buffer [rows, cols] with the given row stride.
inline HostTensor poisoned_logits(int64_t rows, int64_t cols, int64_t row_stride = 0) {
  HostTensor logits(DType::kF32, {rows, cols}, row_stride);
  logits.fill<uint32_t>(kPoisonLogitBits);
  return logits;
}

// ---------------------------------------------------------------------------------------------
// Scoring results against the reference

using ScoreFn = std::function<reference::Score(int64_t row, int64_t column)>;

// Every entry of a logits buffer: visible entries within the derived tolerance of the fp64
// reference score; other columns of the view exactly -inf (clean) or untouched (not clean);
// columns between the view's width and its row stride untouched.
inline ::testing::AssertionResult LogitsMatch(const HostTensor& logits,
                                              const std::vector<int64_t>& starts,
                                              const std::vector<int64_t>& ends,
                                              const ScoreFn& score, int head_dim, int heads,
                                              bool clean, bool tensor_cores = false) {
  const int64_t width = logits.size(1);
  const int64_t row_stride = logits.stride(0);
  for (int64_t t = 0; t < logits.size(0); ++t) {
    for (int64_t s = 0; s < row_stride; ++s) {
      const float got = logits.data<float>()[t * row_stride + s];
      if (s < width && s >= starts[t] && s < ends[t]) {
        const reference::Score expected = score(t, s);
        const double tolerance = logit_tolerance(head_dim, heads, expected.magnitude, tensor_cores);
        if (!(std::fabs(static_cast<double>(got) - expected.value) <= tolerance)) {
          return ::testing::AssertionFailure()
                 << "row " << t << " key " << s << ": got " << got << ", reference "
                 << expected.value << ", |diff| " << std::fabs(got - expected.value)
                 << " > tolerance " << tolerance << " (magnitude " << expected.magnitude << ")";
        }
      } else if (s < width && clean) {
        if (float_bits(got) != float_bits(-kInf)) {
          return ::testing::AssertionFailure()
                 << "row " << t << " column " << s << " outside [" << starts[t] << ", " << ends[t]
                 << ") is " << got << ", expected -inf (clean=true)";
        }
      } else if (float_bits(got) != kPoisonLogitBits) {
        return ::testing::AssertionFailure()
               << "row " << t << " column " << s << " was written (" << got << ") but "
               << (s >= width ? "lies beyond the logits width "
                              : "is outside the visible range with clean=false")
               << (s >= width ? std::to_string(width) : std::string());
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// Reference scores are computed once per problem and reused across option sets.
inline ScoreFn cached(ScoreFn score, int64_t rows, int64_t width) {
  auto cache = std::make_shared<std::vector<reference::Score>>(static_cast<size_t>(rows * width),
                                                               reference::Score{NAN, NAN});
  return [=](int64_t t, int64_t s) {
    reference::Score& entry = (*cache)[t * width + s];
    if (std::isnan(entry.value)) entry = score(t, s);
    return entry;
  };
}

// A problem with its reference scores (computed lazily, once).
struct PrefillRun {
  PrefillProblem problem;
  std::vector<int64_t> starts;
  std::vector<int64_t> ends;
  ScoreFn score;
};

inline PrefillRun prefill_run(Rng& rng, const OperandCase& c, int64_t rows, int64_t keys) {
  PrefillRun run{make_prefill_problem(rng, c.format, rows, keys, c.heads, c.head_dim), {}, {}, {}};
  PrefillProblem& p = run.problem;
  for (int64_t t = 0; t < rows; ++t) {
    run.starts.push_back(p.ks.data<int32_t>()[t]);
    run.ends.push_back(p.ke.data<int32_t>()[t]);
  }
  QuantizedTensor q = p.q.view();
  QuantizedTensor k = p.keys.view();
  TensorView w = p.weights.view();
  run.score = cached([=](int64_t t, int64_t s) { return reference::prefill_score(q, k, w, t, s); },
                     rows, keys);
  return run;
}

struct PagedRun {
  DecodeProblem problem;
  std::vector<int64_t> starts;
  ScoreFn score;
};

inline PagedRun paged_run(Rng& rng, const DecodeConfig& config, const std::vector<int32_t>& forced = {}) {
  PagedRun run{make_decode_problem(rng, config, forced), {}, {}};
  DecodeProblem& p = run.problem;
  run.starts.assign(static_cast<size_t>(p.rows()), 0);
  QuantizedTensor q = p.q.view();
  PagedKCache cache = p.cache.cache();
  TensorView w = p.weights.view();
  TensorView table = p.block_table.view();
  run.score = cached(
      [=](int64_t r, int64_t s) { return reference::decode_score(q, cache, w, table, r, s); },
      p.rows(), p.width);
  return run;
}

inline std::string describe(const DecodeConfig& config) {
  return std::string(kformat_name(config.format)) + " H=" + std::to_string(config.heads) +
         " D=" + std::to_string(config.head_dim) + " next_n=" + std::to_string(config.next_n) +
         " page_size=" + std::to_string(config.page_size) +
         " stride_pad=" + std::to_string(config.stride_pad_bytes) +
         (config.two_dim_lens ? " context_lens [B, next_n]" : " context_lens [B]");
}

}  // namespace fitest
