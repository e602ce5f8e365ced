// SIMD compare-and-append for StreamingTopK: the rank keys of the scores whose order bits reach
// the floor. With a good floor almost every vector has no survivor, so the pass runs at the
// speed of reading the scores; the rare survivors are appended lane by lane.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/filter_scores.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "cpu/streaming_topk.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

size_t FilterScores(const float* HWY_RESTRICT scores, size_t n, uint32_t floor,
                    uint32_t first_index, uint64_t* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const size_t lanes = hn::Lanes(df);
  // Order bits as signed integers (the unsigned order bits with the top bit flipped), so the
  // floor test is one signed compare: sign set -> ~bits, else bits; -0 -> +0; NaN -> lowest.
  const auto top_bit = hn::Set(di, static_cast<int32_t>(0x80000000u));
  const auto floor_signed = hn::Set(di, static_cast<int32_t>(floor ^ 0x80000000u));
  const auto order_of = [&](const auto v) {
    const auto bits = hn::BitCast(di, v);
    // Sign clear: the bits themselves; sign set: (~bits) ^ top_bit = bits ^ 0x7fffffff.
    auto order = hn::IfThenElse(hn::Lt(bits, hn::Zero(di)),
                                hn::Xor(bits, hn::Set(di, 0x7FFFFFFF)), bits);
    order = hn::IfThenElse(hn::Eq(bits, top_bit), hn::Zero(di), order);
    return hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), top_bit, order);
  };
  // The survivors of a vector are found from its mask bits, so the cost grows with the
  // survivors, not with the lanes of their vector (Highway's CompressStore copies a table).
  HWY_ALIGN int32_t orders[hn::MaxLanes(di)];
  uint8_t mask_bytes[8] = {};
  size_t count = 0;
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto order = order_of(hn::LoadU(df, scores + i));
    const auto passes = hn::Not(hn::Lt(order, floor_signed));
    if (hn::AllFalse(di, passes)) continue;
    hn::Store(order, di, orders);
    hn::StoreMaskBits(di, passes, mask_bytes);
    uint64_t mask;
    std::memcpy(&mask, mask_bytes, sizeof mask);
    for (; mask != 0; mask &= mask - 1) {
      const int lane = __builtin_ctzll(mask);
      out[count++] = rank_key_of_bits(static_cast<uint32_t>(orders[lane]) ^ 0x80000000u,
                                      first_index + static_cast<uint32_t>(i + lane));
    }
  }
  for (; i < n; ++i) {
    const uint32_t key_bits = ordered_score_bits(scores[i]);
    out[count] = rank_key_of_bits(key_bits, first_index + static_cast<uint32_t>(i));
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
