// SPDX-License-Identifier: Apache-2.0
#include "fuzz_input.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "reference/reference.h"

namespace flashindexer::fuzz {

FuzzInput::FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {
  for (int i = 0; i < 4; ++i) state_ = state_ << 8 | byte();
  break_kind = byte();
  // One call in four keeps every argument valid; the others break one of the first tensors.
  const int target = byte();
  break_target = target < 64 ? -1 : target % 12;
}

uint8_t FuzzInput::byte() { return pos_ < size_ ? data_[pos_++] : 0; }

int64_t FuzzInput::range(int64_t lo, int64_t hi) {
  if (hi <= lo) return lo;
  const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  uint64_t value = byte();
  if (span > 256) value = value << 8 | byte();
  return lo + static_cast<int64_t>(value % span);
}

uint64_t FuzzInput::random() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

float palette_float(FuzzInput& in, Fill fill) {
  const uint64_t r = in.random();
  const int choice = static_cast<int>(r % 32);
  const float small = static_cast<float>(static_cast<int>((r >> 8) % 9) - 4);
  const float uniform = static_cast<float>((r >> 16) % 2001) / 1000.0f - 1.0f;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  switch (fill) {
    case Fill::kScores:
      switch (choice) {
        case 0:
          return 0.0f;
        case 1:
          return -0.0f;
        case 2:
          return inf;
        case 3:
          return -inf;
        case 4:
          return nan;
        case 5:
          return -nan;
        case 6:
          return std::numeric_limits<float>::denorm_min();
        case 7:
          return -std::numeric_limits<float>::max();
        case 8:
          return std::numeric_limits<float>::max();
        default:
          return choice < 20 ? small : uniform;
      }
    case Fill::kWeights:
      if (choice == 0) return nan;
      if (choice == 1) return inf;
      if (choice < 4) return 0.0f;
      return choice < 16 ? small / 4.0f : uniform;
    case Fill::kKeyScales:
      if (choice == 0) return nan;
      if (choice == 1) return 0.0f;
      if (choice == 2) return -1.0f;
      return std::ldexp(1.0f, static_cast<int>((r >> 8) % 9) - 4);
    default:
      return 0.0f;
  }
}

namespace {

int64_t span_of(const TensorView& view) {
  int64_t last = 0;
  for (int d = 0; d < view.held_rank(); ++d) {
    if (view.shape[d] <= 0) return 0;
    if (view.stride[d] > 0) last += (view.shape[d] - 1) * view.stride[d];
  }
  return view.held_rank() == 0 ? 0 : last + 1;
}

void packed_strides(TensorView& view, FuzzInput& in) {
  int64_t stride = 1;
  for (int d = view.held_rank() - 1; d >= 0; --d) {
    const int64_t pad = d < view.held_rank() - 1 && in.chance(48) ? in.range(1, 3) : 0;
    view.stride[d] = stride + pad;
    stride = view.stride[d] * std::max<int64_t>(view.shape[d], 1);
  }
}

void break_view(TensorView& view, FuzzInput& in) {
  const int rank = view.held_rank();
  switch (in.break_kind % 8) {
    case 0:  // another dtype
      view.dtype =
          static_cast<DType>((static_cast<int>(view.dtype) + 1 + in.break_kind / 8 % 7) % 8);
      break;
    case 1:  // one dimension more or less, or none
      if (in.break_kind & 8) {
        if (rank < kMaxRank) {
          view.shape[rank] = 1;
          view.stride[rank] = 1;
        }
        view.rank = rank + 1;
      } else {
        view.rank = rank - 1;
      }
      break;
    case 2:  // an extent off by one (maybe negative)
      if (rank > 0) {
        view.shape[in.break_kind / 8 % rank] += (in.break_kind & 64) ? 1 : -1;
        packed_strides(view, in);
      }
      break;
    case 3:  // a strided last dimension, or rows closer than their length
      if (rank > 0 && (in.break_kind & 8)) view.stride[rank - 1] = 2;
      if (rank > 1 && !(in.break_kind & 8)) view.stride[0] = view.shape[rank - 1] / 2;
      break;
    case 4:
      view.device = Device::kCUDA;
      break;
    case 5:
      view.rank = 0;
      break;
    case 6:
      view.data = nullptr;
      break;
    default:  // a huge extent the op must refuse before it touches memory, or a negative stride
      if (rank > 0 && in.extents_bounded) view.shape[0] = int64_t{1} << 40;
      if (rank > 0 && !in.extents_bounded) view.stride[0] = -view.stride[0] - 1;
      break;
  }
}

}  // namespace

Tensor make_tensor(FuzzInput& in, DType dtype, std::initializer_list<int64_t> shape, Fill fill) {
  Tensor t;
  t.view.dtype = dtype;
  t.view.rank = static_cast<int>(shape.size());
  int d = 0;
  for (int64_t extent : shape) t.view.shape[d++] = extent;
  packed_strides(t.view, in);
  const bool broken = in.created++ == in.break_target;
  bool null_data = false;
  if (broken) {
    in.valid = false;
    break_view(t.view, in);
    null_data = in.break_kind % 8 == 6;
  }
  // The huge extent of break kind 7 gets no memory: reading it at all is a bug ASan reports.
  const bool huge = broken && in.break_kind % 8 == 7 && in.extents_bounded;
  const int64_t span = huge ? 0 : span_of(t.view);
  const size_t element = dtype_size(t.view.dtype);
  t.memory.resize(static_cast<size_t>(span) * element);
  for (int64_t i = 0; i < span; ++i) {
    uint8_t* at = t.memory.data() + i * element;
    if (t.view.dtype == DType::kF32) {
      const float value = palette_float(in, fill);
      std::memcpy(at, &value, 4);
    } else if (t.view.dtype == DType::kBF16) {
      const uint16_t bits = float_to_bf16(palette_float(in, fill));
      std::memcpy(at, &bits, 2);
    } else {
      for (size_t b = 0; b < element; ++b) {
        const uint64_t r = in.random();
        uint8_t value = static_cast<uint8_t>(r);
        if (fill == Fill::kZero) value = 0;
        if (fill == Fill::kScaleBytes) value = (r >> 8) % 64 == 0 ? 255 : 121 + (r >> 16) % 13;
        at[b] = value;
      }
    }
  }
  t.view.data = null_data || t.memory.empty() ? nullptr : t.memory.data();
  if (!null_data && t.memory.empty()) {
    // An empty view still gets a non-null pointer, so a null check cannot mask a shape check.
    static uint8_t no_elements;
    t.view.data = &no_elements;
  }
  return t;
}

Tensor plain_tensor(DType dtype, std::initializer_list<int64_t> shape) {
  FuzzInput none(nullptr, 0);
  none.break_target = -1;
  return make_tensor(none, dtype, shape, Fill::kZero);
}

Tensor cache_pages(FuzzInput& in, int64_t bytes) {
  Tensor t = plain_tensor(DType::kU8, {std::max<int64_t>(bytes, 0)});
  for (uint8_t& byte : t.memory) byte = static_cast<uint8_t>(in.random());
  return t;
}

RunOptions make_run_options(FuzzInput& in, std::vector<uint8_t>& workspace,
                            const std::function<size_t(int threads)>& needed) {
  RunOptions options;
  options.cpu_threads = static_cast<int>(in.range(0, 3));
  const size_t bytes = needed(options.cpu_threads);
  switch (in.range(0, 7)) {
    case 1:
      workspace.resize(bytes);
      break;
    case 2:
      workspace.resize(bytes + 64);
      break;
    case 3:
      if (bytes == 0) break;
      workspace.resize(bytes - 1);
      in.valid = false;
      break;
    default:
      return options;
  }
  static uint8_t no_bytes;
  options.workspace = workspace.empty() ? &no_bytes : workspace.data();
  options.workspace_bytes = workspace.size();
  return options;
}

void violation(const char* op, const std::string& what) {
  std::fprintf(stderr, "\nCONTRACT VIOLATION in %s: %s\n", op, what.c_str());
  std::fflush(stderr);
  std::abort();
}

size_t Tensor::offset(std::initializer_list<int64_t> index) const {
  int64_t element = 0;
  int d = 0;
  for (int64_t i : index) element += i * view.stride[d++];
  return static_cast<size_t>(element) * dtype_size(view.dtype);
}

bool Tensor::holds(std::initializer_list<int64_t> index) const {
  if (view.data == nullptr || static_cast<int>(index.size()) != view.rank) return false;
  int d = 0;
  for (int64_t i : index) {
    if (i < 0 || i >= view.shape[d]) return false;
    ++d;
  }
  return offset(index) + dtype_size(view.dtype) <= memory.size();
}

void Tensor::set_i32(std::initializer_list<int64_t> index, int32_t value) {
  if (view.dtype == DType::kI32 && holds(index))
    std::memcpy(memory.data() + offset(index), &value, 4);
  if (view.dtype == DType::kI64 && holds(index)) {
    const int64_t wide = value;
    std::memcpy(memory.data() + offset(index), &wide, 8);
  }
}

void Tensor::set_i64(std::initializer_list<int64_t> index, int64_t value) {
  if (view.dtype == DType::kI64 && holds(index))
    std::memcpy(memory.data() + offset(index), &value, 8);
  if (view.dtype == DType::kI32 && holds(index)) set_i32(index, static_cast<int32_t>(value));
}

template <typename T>
T Tensor::get(std::initializer_list<int64_t> index) const {
  T value{};
  std::memcpy(&value, memory.data() + offset(index), sizeof(T));
  return value;
}
template int32_t Tensor::get<int32_t>(std::initializer_list<int64_t>) const;
template int64_t Tensor::get<int64_t>(std::initializer_list<int64_t>) const;
template float Tensor::get<float>(std::initializer_list<int64_t>) const;
template uint8_t Tensor::get<uint8_t>(std::initializer_list<int64_t>) const;

void expect_unchanged(const char* op, const char* name, const Tensor& tensor) {
  if (tensor.memory != tensor.before) violation(op, std::string("wrote into its input ") + name);
}

void expect_untouched_outside(const char* op, const char* name, const Tensor& tensor, int64_t rows,
                              int64_t columns) {
  std::vector<bool> writable(tensor.memory.size(), false);
  const size_t element = dtype_size(tensor.view.dtype);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < columns; ++c) {
      const size_t at = tensor.offset({r, c});
      for (size_t b = 0; b < element && at + b < writable.size(); ++b) writable[at + b] = true;
    }
  }
  for (size_t i = 0; i < tensor.memory.size(); ++i) {
    if (!writable[i] && tensor.memory[i] != tensor.before[i]) {
      violation(op, std::string("wrote byte ") + std::to_string(i) + " of " + name +
                        ", outside its [" + std::to_string(rows) + ", " + std::to_string(columns) +
                        "] output");
    }
  }
}

void expect_well_formed_rows(const char* op, const Tensor& out, const RowRanges& ranges, int k) {
  for (int64_t r = 0; r < out.view.shape[0]; ++r) {
    const reference::Range range = reference::row_range(ranges, r);
    const int64_t visible = std::max<int64_t>(range.end - range.start, 0);
    const int64_t filled = std::min<int64_t>(visible, k);
    std::vector<bool> seen(static_cast<size_t>(visible), false);
    for (int64_t c = 0; c < k; ++c) {
      const int32_t index = out.get<int32_t>({r, c});
      const std::string where = "row " + std::to_string(r) + " column " + std::to_string(c) +
                                " holds " + std::to_string(index) + " (" + std::to_string(visible) +
                                " visible keys, k=" + std::to_string(k) + ")";
      if (c >= filled) {
        if (index != -1) violation(op, where + ", expected -1 padding");
        continue;
      }
      if (index < 0 || index >= visible) violation(op, where + ", out of range");
      if (seen[index]) violation(op, where + ", a repeated index");
      seen[index] = true;
    }
  }
}

void expect_topk(const char* op, const Tensor& out, const TensorView& logits,
                 const RowRanges& ranges, int k, bool sorted) {
  const int64_t rows = logits.shape[0];
  expect_untouched_outside(op, "out", out, rows, k);
  expect_well_formed_rows(op, out, ranges, k);
  Tensor expected = plain_tensor(DType::kI32, {rows, k});
  reference::topk_per_row(expected.view, logits, ranges, k);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int32_t> want, got;
    for (int64_t c = 0; c < k; ++c) {
      want.push_back(expected.get<int32_t>({r, c}));
      got.push_back(out.get<int32_t>({r, c}));
    }
    if (!sorted) {
      const auto valid_end = std::find(want.begin(), want.end(), -1);
      std::sort(want.begin(), valid_end);
    }
    if (want != got) {
      std::string text = "row " + std::to_string(r) + " differs from the reference top-k: got";
      for (int32_t v : got) text += " " + std::to_string(v);
      text += ", expected";
      for (int32_t v : want) text += " " + std::to_string(v);
      violation(op, text);
    }
  }
}

void expect_same_rows(const char* op, const Tensor& a, const Tensor& b, int64_t rows, int k) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      if (a.get<int32_t>({r, c}) != b.get<int32_t>({r, c})) {
        violation(op, "row " + std::to_string(r) + " column " + std::to_string(c) + " holds " +
                          std::to_string(a.get<int32_t>({r, c})) + ", topk_per_row of the logits " +
                          "op holds " + std::to_string(b.get<int32_t>({r, c})));
      }
    }
  }
}

}  // namespace flashindexer::fuzz
