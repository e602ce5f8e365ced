// SPDX-License-Identifier: Apache-2.0
// Dequantizing FP8 keys into a transposed tile (score.h), the per-tile cost the decode path pays
// once per row. Targets with 256-bit vectors transpose the codes of 8 keys as bytes and convert
// each dim's 8 codes with bit arithmetic; the others, and any group of 8 keys holding a NaN
// code, use the exact table. Both give the same floats (e4m3 values are exact in fp32; both NaN
// codes become +qNaN).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/scoring/tile_load.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/scoring/score.h"

HWY_BEFORE_NAMESPACE();
namespace flashindexer::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Keys [0, count) go to column i of tile rows [0, head_dim); the rest is the table path.
void DecodeFp8Columns(float* HWY_RESTRICT tile, const uint8_t* const* values, int first, int count,
                      int head_dim) {
  for (int i = first; i < count; ++i) decode_fp8_column(tile + i, kKeyTile, values[i], head_dim);
}

#if HWY_TARGET <= HWY_AVX2
// Keys are decoded 8 at a time, 32 dims at a time. The codes are transposed as bytes first
// (three rounds of interleaves within 128-bit blocks, a quarter of the shuffles a float
// transpose needs), then each dim's 8 codes become 8 floats in four operations.
constexpr int kKeyGroup = 8;
constexpr int kDimBlock = 32;

// Codes of keys [0, 8), dims [0, 32) (keys[j] + d) -> out[m * 32 + 16 * b + 8 * h + j] is
// the code of key j at dim 16 * b + 2 * m + h (m < 8, b, h < 2): one interleave round pairs
// the keys, the next the pairs, the last the quads, each within the 128-bit blocks b.
// `nan_probe` collects max(code | 0x80) over the codes: 0xFF means a NaN code.
template <class D8>
HWY_INLINE void TransposeCodes(D8 d8, uint8_t* HWY_RESTRICT out, const uint8_t* const* keys, int d,
                               hn::Vec<D8>& nan_probe) {
  const hn::Repartition<uint16_t, D8> d16;
  const hn::Repartition<uint32_t, D8> d32;
  hn::Vec<D8> k[kKeyGroup];
  for (int j = 0; j < kKeyGroup; ++j) {
    k[j] = hn::LoadU(d8, keys[j] + d);
    nan_probe = hn::Max(nan_probe, hn::Or(k[j], hn::Set(d8, 0x80)));
  }
  // pairs[p][h]: keys 2p, 2p + 1 interleaved; dims 8h..8h+7 of each block.
  hn::Vec<decltype(d16)> pairs[4][2];
  for (int p = 0; p < 4; ++p) {
    pairs[p][0] = hn::BitCast(d16, hn::InterleaveLower(d8, k[2 * p], k[2 * p + 1]));
    pairs[p][1] = hn::BitCast(d16, hn::InterleaveUpper(d8, k[2 * p], k[2 * p + 1]));
  }
  // quads[q][g]: keys 4q..4q+3, dims 4g..4g+3 of each block.
  hn::Vec<decltype(d32)> quads[2][4];
  for (int q = 0; q < 2; ++q) {
    for (int h = 0; h < 2; ++h) {
      quads[q][2 * h] =
          hn::BitCast(d32, hn::InterleaveLower(d16, pairs[2 * q][h], pairs[2 * q + 1][h]));
      quads[q][2 * h + 1] =
          hn::BitCast(d32, hn::InterleaveUpper(d16, pairs[2 * q][h], pairs[2 * q + 1][h]));
    }
  }
  // Output m: keys 0..7 of dims 2m, 2m + 1 of each block.
  for (int g = 0; g < 4; ++g) {
    hn::Store(hn::BitCast(d8, hn::InterleaveLower(d32, quads[0][g], quads[1][g])), d8,
              out + (2 * g) * kDimBlock);
    hn::Store(hn::BitCast(d8, hn::InterleaveUpper(d32, quads[0][g], quads[1][g])), d8,
              out + (2 * g + 1) * kDimBlock);
  }
}

// 8 e4m3 codes (no NaN code) -> 8 floats: the sign-extended code shifted so that its magnitude
// bits sit in the fp32 exponent/mantissa position and its sign in the sign bit, then rescaled
// by 2^120 (exact, subnormals included).
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeE4M3x8(DF df, const uint8_t* codes) {
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const auto x = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(codes)));
  const auto bits = hn::And(hn::ShiftLeft<20>(x), hn::Set(di, static_cast<int32_t>(0x87F00000u)));
  return hn::Mul(hn::BitCast(df, bits), hn::Set(df, 0x1p120f));
}

void DecodeFp8Tile(float* HWY_RESTRICT tile, const uint8_t* const* values, int count,
                   int head_dim) {
  const hn::FixedTag<float, 8> df;
  const hn::Full256<uint8_t> d8;
  // All codes are transposed before any is converted: reading back a piece of a vector just
  // stored would wait for the store.
  alignas(32) uint8_t codes[kKeyTile * kMaxScoringHeadDim];
  const int full = count / kKeyGroup * kKeyGroup;
  for (int i = 0; i < full; i += kKeyGroup) {
    auto nan_probe = hn::Zero(d8);
    for (int d = 0; d < head_dim; d += kDimBlock) {
      TransposeCodes(d8, codes + i * head_dim + d * kKeyGroup, values + i, d, nan_probe);
    }
    // NaN codes (absent from real caches) take the exact table, which gives +qNaN.
    if (!hn::AllFalse(d8, hn::Eq(nan_probe, hn::Set(d8, 0xFF)))) {
      DecodeFp8Columns(tile, values, i, i + kKeyGroup, head_dim);
      continue;
    }
    for (int d = 0; d < head_dim; d += kDimBlock) {
      const uint8_t* block = codes + i * head_dim + d * kKeyGroup;
      for (int m = 0; m < 8; ++m) {
        for (int b = 0; b < 2; ++b) {
          for (int h = 0; h < 2; ++h) {
            const int dim = d + 16 * b + 2 * m + h;
            hn::Store(DecodeE4M3x8(df, block + m * kDimBlock + 16 * b + 8 * h), df,
                      tile + dim * kKeyTile + i);
          }
        }
      }
    }
  }
  DecodeFp8Columns(tile, values, full, count, head_dim);
}
#else
void DecodeFp8Tile(float* HWY_RESTRICT tile, const uint8_t* const* values, int count,
                   int head_dim) {
  DecodeFp8Columns(tile, values, 0, count, head_dim);
}
#endif

}  // namespace HWY_NAMESPACE
}  // namespace flashindexer::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace flashindexer::cpu {

HWY_EXPORT(DecodeFp8Tile);

void decode_fp8_tile(float* tile, const uint8_t* const* values, int count, int head_dim) {
  HWY_DYNAMIC_DISPATCH(DecodeFp8Tile)(tile, values, count, head_dim);
}

}  // namespace flashindexer::cpu
#endif  // HWY_ONCE
