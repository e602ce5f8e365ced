// The SIMD scoring microkernel: one query row against one tile of kKeyTile keys.
//
// Keys run across SIMD lanes and each lane sums its own dot product over d in order, so every
// (row, key) score has the same arithmetic on every target Highway dispatches to (AVX-512,
// AVX2, SSE4, scalar): the products of FP8 values are exact in fp32, each addition rounds once,
// and the head sum uses a separate multiply and add (see score.h). Register blocking: 4 heads x
// 2 vectors of keys = 8 accumulators, so each d step loads 2 key vectors and broadcasts 4 query
// values for 8 multiply-adds; the transposed tile (128 x 64 floats = 32 KiB) stays in L1/L2
// while every head of every row of a block streams over it.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/score_tile.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/score.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kHeadBlock = 4;

template <class D, class V>
HWY_INLINE V Relu(D d, V x) {
  // NaN stays NaN (x < 0 is false for NaN), like the reference's max(dot, 0).
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), hn::Zero(d), x);
}

void ScoreTile(float* HWY_RESTRICT scores, const float* HWY_RESTRICT q,
               const float* HWY_RESTRICT weights, int heads, int head_dim,
               const float* HWY_RESTRICT tile, const float* HWY_RESTRICT key_scales) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  for (size_t column = 0; column < static_cast<size_t>(kKeyTile); column += 2 * lanes) {
    auto total0 = hn::Zero(d);
    auto total1 = hn::Zero(d);
    for (int h = 0; h < heads; h += kHeadBlock) {
      const float* q0 = q + h * head_dim;
      const float* q1 = q0 + head_dim;
      const float* q2 = q1 + head_dim;
      const float* q3 = q2 + head_dim;
      auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
      auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
      const float* keys = tile + column;
      for (int i = 0; i < head_dim; ++i, keys += kKeyTile) {
        const auto k0 = hn::Load(d, keys);
        const auto k1 = hn::Load(d, keys + lanes);
        const auto b0 = hn::Set(d, q0[i]);
        a00 = hn::MulAdd(b0, k0, a00);
        a01 = hn::MulAdd(b0, k1, a01);
        const auto b1 = hn::Set(d, q1[i]);
        a10 = hn::MulAdd(b1, k0, a10);
        a11 = hn::MulAdd(b1, k1, a11);
        const auto b2 = hn::Set(d, q2[i]);
        a20 = hn::MulAdd(b2, k0, a20);
        a21 = hn::MulAdd(b2, k1, a21);
        const auto b3 = hn::Set(d, q3[i]);
        a30 = hn::MulAdd(b3, k0, a30);
        a31 = hn::MulAdd(b3, k1, a31);
      }
      // Heads are added in order h, h+1, h+2, h+3: the head sum of score.h.
      const auto w0 = hn::Set(d, weights[h]);
      const auto w1 = hn::Set(d, weights[h + 1]);
      const auto w2 = hn::Set(d, weights[h + 2]);
      const auto w3 = hn::Set(d, weights[h + 3]);
      total0 = hn::Add(total0, hn::Mul(w0, Relu(d, a00)));
      total1 = hn::Add(total1, hn::Mul(w0, Relu(d, a01)));
      total0 = hn::Add(total0, hn::Mul(w1, Relu(d, a10)));
      total1 = hn::Add(total1, hn::Mul(w1, Relu(d, a11)));
      total0 = hn::Add(total0, hn::Mul(w2, Relu(d, a20)));
      total1 = hn::Add(total1, hn::Mul(w2, Relu(d, a21)));
      total0 = hn::Add(total0, hn::Mul(w3, Relu(d, a30)));
      total1 = hn::Add(total1, hn::Mul(w3, Relu(d, a31)));
    }
    hn::Store(hn::Mul(hn::Load(d, key_scales + column), total0), d, scores + column);
    hn::Store(hn::Mul(hn::Load(d, key_scales + column + lanes), total1), d,
              scores + column + lanes);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::cpu {

HWY_EXPORT(ScoreTile);

void score_tile(float* scores, const QueryRow& row, const KeyTile& tile) {
  HWY_DYNAMIC_DISPATCH(ScoreTile)(scores, row.q, row.weights, row.heads, row.head_dim,
                                  tile.values, tile.scales);
}

}  // namespace flashindexer::cpu
#endif  // HWY_ONCE
