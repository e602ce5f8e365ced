// SPDX-License-Identifier: Apache-2.0
// The visible-range rule of src/core/rows.h, which every backend's rows follow.
#include "core/rows.h"

#include <cstdint>

#include "support/tensors.h"

namespace fitest {
namespace {

namespace rows = flashindexer::rows;

void expect_range(rows::Range range, int64_t start, int64_t end) {
  EXPECT_EQ(range.start, start);
  EXPECT_EQ(range.end, end);
}

TEST(VisibleRows, PrefillRangeIsClampedToTheWidth) {
  expect_range(rows::prefill_range(3, 9, 100), 3, 9);
  expect_range(rows::prefill_range(-5, 9, 100), 0, 9);
  expect_range(rows::prefill_range(90, 200, 100), 90, 100);
  expect_range(rows::prefill_range(150, 200, 100), 100, 100);
  expect_range(rows::prefill_range(40, 10, 100), 40, 40);  // ke before ks: empty, at ks
  expect_range(rows::prefill_range(0, 0, 0), 0, 0);
}

TEST(VisibleRows, DecodeRowSeesItsOwnPositionLast) {
  // A request of 10 keys with next_n = 3: rows 0, 1, 2 see 8, 9 and 10 keys.
  EXPECT_EQ(rows::decode_end(10, 3, 0), 8);
  EXPECT_EQ(rows::decode_end(10, 3, 2), 10);
  EXPECT_EQ(rows::decode_end(10, 1, 0), 10);
  EXPECT_EQ(rows::decode_end(1, 3, 0), -1);  // shorter than next_n: negative before the clamp
  expect_range(rows::decode_range(-1, 64), 0, 0);
  expect_range(rows::decode_range(70, 64), 0, 64);
  expect_range(rows::decode_range(30, rows::kUnbounded), 0, 30);
}

TEST(VisibleRows, DecodeRowEndReadsEveryLengthsForm) {
  HostTensor lengths_1d = i32_tensor({10, 1});
  EXPECT_EQ(rows::decode_row_end(lengths_1d.view(), 3, 0), 8);
  EXPECT_EQ(rows::decode_row_end(lengths_1d.view(), 3, 2), 10);
  EXPECT_EQ(rows::decode_row_end(lengths_1d.view(), 3, 3), 0);  // 1 - 3 + 0 + 1 < 0
  EXPECT_EQ(rows::decode_row_end(lengths_1d.view(), 1, 1), 1);
  HostTensor lengths_2d(DType::kI32, {2, 2});
  for (int i = 0; i < 4; ++i) lengths_2d.data<int32_t>()[i] = 4 + i;
  EXPECT_EQ(rows::decode_row_end(lengths_2d.view(), 2, 3), 7);
  EXPECT_EQ(rows::decode_row_end(lengths_2d.view(), 2, 1), 5);
}

}  // namespace
}  // namespace fitest
