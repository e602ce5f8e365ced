// SPDX-License-Identifier: Apache-2.0
// The fuzzer's building blocks: a reader that turns the input bytes into decisions, tensors whose
// memory is exactly the span of their view (so AddressSanitizer sees any access past it) and
// whose bytes are compared before and after a call (so a write into a gap between rows, into
// columns an op must leave alone, or into an input tensor is caught), and the contract checks
// shared by the op families.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "flashindexer/flashindexer.h"

namespace flashindexer::fuzz {

// Structure (shapes, k, flags) comes from the input bytes; past their end every read answers
// 0, so a short input is a small valid case. Tensor contents come from a generator seeded by
// the first bytes, so a small input still fills large tensors.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size);
  uint8_t byte();
  // A value in [lo, hi] (lo when the bytes are exhausted).
  int64_t range(int64_t lo, int64_t hi);
  // True with probability about n / 256.
  bool chance(int n) { return byte() < n; }
  template <typename T>
  const T& pick(std::initializer_list<T> choices) {
    return choices.begin()[range(0, static_cast<int64_t>(choices.size()) - 1)];
  }
  uint64_t random();  // splitmix64 over the seed

  // At most one argument of a call is made invalid on purpose: the break_target-th tensor
  // created, in the way break_kind says. A call that receives one may fail, a call without one
  // must succeed (validity below).
  int break_target = -1;
  int break_kind = 0;
  int created = 0;
  // False once an argument is out of its documented domain (then the op may refuse it).
  bool valid = true;
  // Set by a family whose op bounds its extents (tp_row_shard_plan: rows <= INT32_MAX): then a
  // break may give a tensor a 2^40 extent and no memory, which the op must refuse unread.
  // Elsewhere an op may read every element a view claims, so the break is a negative stride.
  bool extents_bounded = false;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t state_ = 0;
};

// How a tensor's memory is filled: scores and weights from a palette rich in ties, signed
// zeros, infinities and NaN; scales near 1; raw bytes.
enum class Fill { kScores, kWeights, kKeyScales, kRawBytes, kScaleBytes, kZero };

struct Tensor {
  std::vector<uint8_t> memory;  // exactly the view's span
  std::vector<uint8_t> before;  // the bytes at the last snapshot()
  TensorView view;

  Tensor() = default;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  Tensor(Tensor&&) = default;
  Tensor& operator=(Tensor&&) = default;

  void snapshot() { before = memory; }
  // Byte offset of an element of the view (indices in range).
  size_t offset(std::initializer_list<int64_t> index) const;
  void set_i32(std::initializer_list<int64_t> index, int32_t value);
  void set_i64(std::initializer_list<int64_t> index, int64_t value);
  template <typename T>
  T get(std::initializer_list<int64_t> index) const;
  bool holds(std::initializer_list<int64_t> index) const;  // index inside the view's shape
};

// A [shape] tensor of `dtype`, rows padded at random (outer strides >= the packed ones), maybe
// broken on purpose (see FuzzInput::break_target), filled as `fill` says.
Tensor make_tensor(FuzzInput& in, DType dtype, std::initializer_list<int64_t> shape, Fill fill);
// A tensor that is never broken (the fuzzer's own scratch and expected results).
Tensor plain_tensor(DType dtype, std::initializer_list<int64_t> shape);

// The memory behind a PagedKCache: `bytes` random bytes, never broken (the cache describes its
// own geometry, which an op cannot check against the allocation).
Tensor cache_pages(FuzzInput& in, int64_t bytes);

float palette_float(FuzzInput& in, Fill fill);
// Thread count and caller workspace: none, the exact size the op's query gives for the thread
// count (`needed`), more, or too little (then the op must refuse with kWorkspaceTooSmall).
RunOptions make_run_options(FuzzInput& in, std::vector<uint8_t>& workspace,
                            const std::function<size_t(int threads)>& needed);

// Aborts with a message naming the op and what broke (the fuzzer reports it as a crash).
[[noreturn]] void violation(const char* op, const std::string& what);

// The tensor's bytes are those of its snapshot.
void expect_unchanged(const char* op, const char* name, const Tensor& tensor);
// The bytes outside the elements [0, rows) x [0, columns) of a 2-D view are unchanged.
void expect_untouched_outside(const char* op, const char* name, const Tensor& tensor, int64_t rows,
                              int64_t columns);
// out ([rows, >= k] i32) is the top-k of `logits` over `ranges` by the reference (sorted best
// first, or the same set ascending); columns k and beyond untouched.
void expect_topk(const char* op, const Tensor& out, const TensorView& logits,
                 const RowRanges& ranges, int k, bool sorted);
// Every row of out: a prefix of distinct indices in [0, visible) then -1.
void expect_well_formed_rows(const char* op, const Tensor& out, const RowRanges& ranges, int k);
// The two outputs hold the same first k columns of every row, bit for bit.
void expect_same_rows(const char* op, const Tensor& a, const Tensor& b, int64_t rows, int k);

}  // namespace flashindexer::fuzz
