// SPDX-License-Identifier: Apache-2.0
// The store stream of a long prefill step's row bounds (planning.h, fill_consecutive_bounds):
// ks a constant run, ke a run counting up, 8 bytes a row and nothing read. Compiled for every
// Highway target and picked at run time, because the library's baseline x86-64 build would store
// 16 bytes at a time where the CPU can store 32 or 64.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "planning/row_fill.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstdint>

#include "planning/planning.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::planning {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void FillConsecutiveBounds(int32_t* HWY_RESTRICT ks, int32_t* HWY_RESTRICT ke, int64_t rows,
                           int32_t key_begin, int32_t first_key_end) {
  const hn::ScalableTag<int32_t> d;
  const auto lanes = static_cast<int64_t>(hn::Lanes(d));
  const auto starts = hn::Set(d, key_begin);
  const auto step = hn::Set(d, static_cast<int32_t>(lanes));
  auto ends = hn::Iota(d, first_key_end);
  int64_t i = 0;
  for (; i + lanes <= rows; i += lanes) {
    hn::StoreU(starts, d, ks + i);
    hn::StoreU(ends, d, ke + i);
    // The lanes past the last row may wrap here; they are never stored.
    ends = hn::Add(ends, step);
  }
  for (; i < rows; ++i) {
    ks[i] = key_begin;
    ke[i] = first_key_end + static_cast<int32_t>(i);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::planning
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::planning {

HWY_EXPORT(FillConsecutiveBounds);

void fill_consecutive_bounds(int32_t* ks, int32_t* ke, int64_t rows, int32_t key_begin,
                             int32_t first_key_end) {
  HWY_DYNAMIC_DISPATCH(FillConsecutiveBounds)(ks, ke, rows, key_begin, first_key_end);
}

}  // namespace flashindexer::planning
#endif  // HWY_ONCE
