// SPDX-License-Identifier: Apache-2.0
// SIMD compare-and-append for StreamingTopK: the rank keys of the scores whose order bits reach
// the floor. With a good floor almost every vector has no survivor, so the pass runs at the
// speed of reading the scores; the rare survivors are appended lane by lane.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/topk/filter_scores.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "cpu/topk/streaming_topk.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

size_t FilterScores(const float* HWY_RESTRICT scores, size_t n, uint32_t floor,
                    uint32_t first_index, uint64_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t lanes = hn::Lanes(df);
  // Order bits as signed integers (the unsigned order bits with the top bit flipped): sign set
  // -> ~bits, else bits; -0 -> +0; NaN -> lowest. Computed only for vectors with a survivor.
  const auto top_bit = hn::Set(di, static_cast<int32_t>(0x80000000u));
  const auto order_of = [&](const auto v) {
    const auto bits = hn::BitCast(di, v);
    // Sign clear: the bits themselves; sign set: (~bits) ^ top_bit = bits ^ 0x7fffffff.
    auto order =
        hn::IfThenElse(hn::Lt(bits, hn::Zero(di)), hn::Xor(bits, hn::Set(di, 0x7FFFFFFF)), bits);
    order = hn::IfThenElse(hn::Eq(bits, top_bit), hn::Zero(di), order);
    return hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), top_bit, order);
  };
  // The hot test is one float compare per vector (floor 0 admits everything, NaN included).
  const bool everything = floor == 0;
  const auto threshold = hn::Set(df, everything ? 0.0f : key_threshold(floor));
  // The survivors of a vector are found from its mask bits, so the cost grows with the
  // survivors, not with the lanes of their vector (Highway's CompressStore copies a table).
  HWY_ALIGN int32_t orders[hn::MaxLanes(di)];
  uint8_t mask_bytes[8] = {};
  size_t count = 0;
  size_t i = 0;
  // Two passes per block of kMaxPushed scores. The first records, without a branch, which
  // vectors hold a survivor: at the floors the selection runs with (~1.5 k survivors per row), a
  // vector in five or so holds one, so a branch on it mispredicts often. The second visits only
  // those vectors, from L1.
  uint32_t hits[kMaxPushed];
  while (i + lanes <= n) {
    const size_t block_end = i + std::min(n - i, static_cast<size_t>(kMaxPushed)) / lanes * lanes;
    size_t hit_count = 0;
    for (; i < block_end; i += lanes) {
      const auto passes =
          everything ? hn::FirstN(df, lanes) : hn::Ge(hn::LoadU(df, scores + i), threshold);
      hits[hit_count] = static_cast<uint32_t>(i);
      hit_count += hn::AllFalse(df, passes) ? 0 : 1;
    }
    for (size_t h = 0; h < hit_count; ++h) {
      const size_t at = hits[h];
      const auto v = hn::LoadU(df, scores + at);
      const auto passes = everything ? hn::FirstN(df, lanes) : hn::Ge(v, threshold);
      hn::Store(order_of(v), di, orders);
      hn::StoreMaskBits(df, passes, mask_bytes);
      uint64_t mask;
      std::memcpy(&mask, mask_bytes, sizeof mask);
      for (; mask != 0; mask &= mask - 1) {
        const int lane = __builtin_ctzll(mask);
        out[count++] = rank_key(static_cast<uint32_t>(orders[lane]) ^ 0x80000000u,
                                first_index + static_cast<uint32_t>(at + lane));
      }
    }
  }
  for (; i < n; ++i) {
    const uint32_t key_bits = ordered_score_bits(scores[i]);
    out[count] = rank_key(key_bits, first_index + static_cast<uint32_t>(i));
    count += key_bits >= floor;
  }
  return count;
}

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::cpu {

HWY_EXPORT(FilterScores);

size_t filter_scores(const float* scores, size_t n, uint32_t floor, uint32_t first_index,
                     uint64_t* out) {
  return HWY_DYNAMIC_DISPATCH(FilterScores)(scores, n, floor, first_index, out);
}

}  // namespace flashindexer::cpu
#endif  // HWY_ONCE
