// Dequantizing FP8 keys into a transposed tile (score.h), the per-tile cost the decode path pays
// once per row. Targets with 256-bit vectors convert 8 bytes of 8 keys at a time with bit
// arithmetic and transpose the 8 x 8 block in registers; the others use the exact table. Both
// give the same floats (e4m3 values are exact in fp32; both NaN codes become +qNaN).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/tile_load.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "cpu/score.h"

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
// 8 e4m3 codes -> 8 floats: magnitude bits moved into the fp32 exponent/mantissa position and
// rescaled by 2^120 (exact, subnormals included), the sign OR-ed in, NaN codes -> +qNaN.
template <class DF>
HWY_INLINE hn::Vec<DF> DecodeE4M3x8(DF df, const uint8_t* codes) {
  const hn::Rebind<uint32_t, DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const auto x = hn::PromoteTo(du, hn::LoadU(d8, codes));
  const auto magnitude_bits = hn::And(x, hn::Set(du, 0x7Fu));
  const auto magnitude =
      hn::Mul(hn::BitCast(df, hn::ShiftLeft<20>(magnitude_bits)), hn::Set(df, 0x1p120f));
  const auto value = hn::Or(magnitude, hn::BitCast(df, hn::ShiftLeft<24>(hn::And(x, hn::Set(du, 0x80u)))));
  const auto nan = hn::RebindMask(df, hn::Eq(magnitude_bits, hn::Set(du, 0x7Fu)));
  return hn::IfThenElse(nan, hn::BitCast(df, hn::Set(du, 0x7FC00000u)), value);
}

void DecodeFp8Tile(float* HWY_RESTRICT tile, const uint8_t* const* values, int count,
                   int head_dim) {
  const hn::FixedTag<float, 8> df;
  const hn::Repartition<uint64_t, decltype(df)> d64;
  const auto pairs = [&](auto a, auto b, bool upper) {
    return upper ? hn::BitCast(df, hn::InterleaveUpper(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)))
                 : hn::BitCast(df, hn::InterleaveLower(d64, hn::BitCast(d64, a), hn::BitCast(d64, b)));
  };
  const int full = count / 8 * 8;
  for (int i = 0; i < full; i += 8) {
    for (int d = 0; d < head_dim; d += 8) {
      // r_j: key i + j, dims d..d+7. Transpose to c_j: dim d + j, keys i..i+7.
      const auto r0 = DecodeE4M3x8(df, values[i] + d), r1 = DecodeE4M3x8(df, values[i + 1] + d);
      const auto r2 = DecodeE4M3x8(df, values[i + 2] + d), r3 = DecodeE4M3x8(df, values[i + 3] + d);
      const auto r4 = DecodeE4M3x8(df, values[i + 4] + d), r5 = DecodeE4M3x8(df, values[i + 5] + d);
      const auto r6 = DecodeE4M3x8(df, values[i + 6] + d), r7 = DecodeE4M3x8(df, values[i + 7] + d);
      const auto t0 = hn::InterleaveLower(df, r0, r1), t1 = hn::InterleaveUpper(df, r0, r1);
      const auto t2 = hn::InterleaveLower(df, r2, r3), t3 = hn::InterleaveUpper(df, r2, r3);
      const auto t4 = hn::InterleaveLower(df, r4, r5), t5 = hn::InterleaveUpper(df, r4, r5);
      const auto t6 = hn::InterleaveLower(df, r6, r7), t7 = hn::InterleaveUpper(df, r6, r7);
      const auto u0 = pairs(t0, t2, false), u1 = pairs(t0, t2, true);
      const auto u2 = pairs(t1, t3, false), u3 = pairs(t1, t3, true);
      const auto u4 = pairs(t4, t6, false), u5 = pairs(t4, t6, true);
      const auto u6 = pairs(t5, t7, false), u7 = pairs(t5, t7, true);
      float* out = tile + d * kKeyTile + i;
      hn::Store(hn::ConcatLowerLower(df, u4, u0), df, out);
      hn::Store(hn::ConcatLowerLower(df, u5, u1), df, out + kKeyTile);
      hn::Store(hn::ConcatLowerLower(df, u6, u2), df, out + 2 * kKeyTile);
      hn::Store(hn::ConcatLowerLower(df, u7, u3), df, out + 3 * kKeyTile);
      hn::Store(hn::ConcatUpperUpper(df, u4, u0), df, out + 4 * kKeyTile);
      hn::Store(hn::ConcatUpperUpper(df, u5, u1), df, out + 5 * kKeyTile);
      hn::Store(hn::ConcatUpperUpper(df, u6, u2), df, out + 6 * kKeyTile);
      hn::Store(hn::ConcatUpperUpper(df, u7, u3), df, out + 7 * kKeyTile);
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
