// SPDX-License-Identifier: Apache-2.0
// The SIMD scoring microkernel: one query row against one tile of kKeyTile keys.
//
// Keys run across SIMD lanes and each lane sums its own dot product over d in order, so every
// (row, key) score has the same arithmetic on every target Highway dispatches to (AVX-512,
// AVX2, SSE4, scalar): the products of FP8 values are exact in fp32, each addition rounds once,
// and the head sum uses a separate multiply and add (see score.h). Register blocking: 4 heads x
// 3 vectors of keys = 12 accumulators (enough to hide the multiply-add latency at two per cycle,
// and with the 3 key vectors and 1 broadcast, all 16 AVX2 registers), so each d step loads 3 key
// vectors and broadcasts 4 query
// values for 12 multiply-adds; the transposed tile (128 x 48 floats = 24 KiB) stays in L1/L2
// while every head of every row of a block streams over it.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scoring/score_tile.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/scoring/score.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kHeadBlock = 4;
constexpr size_t kKeyVectors = 3;

template <class D, class V>
HWY_INLINE V Relu(D d, V x) {
  // NaN stays NaN (x < 0 is false for NaN), like the reference's max(dot, 0).
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Zero(d), x);
}

// total_j += weight * relu(dot_j): a rounded multiply, then an add (never fused).
template <class D, class V>
HWY_INLINE void AddHead(D d, float weight, V dot0, V dot1, V dot2, V& total0, V& total1,
                        V& total2) {
  const auto w = hn::Set(d, weight);
  total0 = hn::Add(total0, hn::Mul(w, Relu(d, dot0)));
  total1 = hn::Add(total1, hn::Mul(w, Relu(d, dot1)));
  total2 = hn::Add(total2, hn::Mul(w, Relu(d, dot2)));
}

void ScoreTile(float* HWY_RESTRICT scores, const float* HWY_RESTRICT q,
               const float* HWY_RESTRICT weights, int heads, int head_dim,
               const float* HWY_RESTRICT tile, const float* HWY_RESTRICT key_scales) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (size_t column = 0; column < static_cast<size_t>(kKeyTile); column += kKeyVectors * lanes) {
    auto total0 = hn::Zero(d), total1 = hn::Zero(d), total2 = hn::Zero(d);
    for (int h = 0; h < heads; h += kHeadBlock) {
      const float* q0 = q + h * head_dim;
      const float* q1 = q0 + head_dim;
      const float* q2 = q1 + head_dim;
      const float* q3 = q2 + head_dim;
      auto a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d);
      auto a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d);
      auto a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d);
      auto a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d);
      const float* keys = tile + column;
      for (int i = 0; i < head_dim; ++i, keys += kKeyTile) {
        const auto k0 = hn::Load(d, keys);
        const auto k1 = hn::Load(d, keys + lanes);
        const auto k2 = hn::Load(d, keys + 2 * lanes);
        auto b = hn::Set(d, q0[i]);
        a00 = hn::MulAdd(b, k0, a00);
        a01 = hn::MulAdd(b, k1, a01);
        a02 = hn::MulAdd(b, k2, a02);
        b = hn::Set(d, q1[i]);
        a10 = hn::MulAdd(b, k0, a10);
        a11 = hn::MulAdd(b, k1, a11);
        a12 = hn::MulAdd(b, k2, a12);
        b = hn::Set(d, q2[i]);
        a20 = hn::MulAdd(b, k0, a20);
        a21 = hn::MulAdd(b, k1, a21);
        a22 = hn::MulAdd(b, k2, a22);
        b = hn::Set(d, q3[i]);
        a30 = hn::MulAdd(b, k0, a30);
        a31 = hn::MulAdd(b, k1, a31);
        a32 = hn::MulAdd(b, k2, a32);
      }
      // Heads are added in order h, h+1, h+2, h+3: the head sum of score.h.
      AddHead(d, weights[h], a00, a01, a02, total0, total1, total2);
      AddHead(d, weights[h + 1], a10, a11, a12, total0, total1, total2);
      AddHead(d, weights[h + 2], a20, a21, a22, total0, total1, total2);
      AddHead(d, weights[h + 3], a30, a31, a32, total0, total1, total2);
    }
    hn::Store(hn::Mul(hn::Load(d, key_scales + column), total0), d, scores + column);
    hn::Store(hn::Mul(hn::Load(d, key_scales + column + lanes), total1), d,
              scores + column + lanes);
    hn::Store(hn::Mul(hn::Load(d, key_scales + column + 2 * lanes), total2), d,
              scores + column + 2 * lanes);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::cpu {

HWY_EXPORT(ScoreTile);

void score_tile(float* scores, const QueryRow& row, const KeyTile& tile) {
  HWY_DYNAMIC_DISPATCH(ScoreTile)
  (scores, row.q, row.weights, row.heads, row.head_dim, tile.values, tile.scales);
}

}  // namespace flashindexer::cpu
#endif  // HWY_ONCE
