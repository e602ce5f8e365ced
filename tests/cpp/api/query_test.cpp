// SPDX-License-Identifier: Apache-2.0
// Query quantization and RoPE (query.h, rope.h; spec §2.2 - §2.4) on CPU tensors, against the
// reference restatement of the formulas; the cache writer's fused key RoPE likewise.
#include "reference/query.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "support/compare.h"
#include "support/query_inputs.h"

namespace fitest {
namespace {

struct RopeCase {
  RopeStyle style;
  RopeDims dims;
};
const RopeCase kRopeCases[] = {{RopeStyle::kNone, RopeDims::kUnspecified},
                               {RopeStyle::kNeox, RopeDims::kFirst64},
                               {RopeStyle::kNeox, RopeDims::kLast64},
                               {RopeStyle::kInterleaved, RopeDims::kFirst64},
                               {RopeStyle::kInterleaved, RopeDims::kLast64}};

std::string describe(const RopeCase& c) {
  return std::string("rope ") + rope_style_name(c.style) +
         (c.dims == RopeDims::kLast64 ? " last64" : " first64");
}

// One query problem: q [T, H, D], weights [T, H], the cos/sin cache and positions.
struct QueryProblem {
  int64_t tokens, heads;
  int head_dim;
  std::vector<float> q_values, weight_values, table_values;
  std::vector<int64_t> positions;
  HostTensor q, weights, table, position_tensor_;
  RopeOptions rope;
};

QueryProblem make_problem(Rng& rng, int64_t tokens, int64_t heads, int head_dim, DType q_dtype,
                          DType weight_dtype, const RopeCase& rope_case, DType position_dtype) {
  QueryProblem p{tokens, heads, head_dim, {}, {}, {}, {}, {}, {}, {}, {}, {}};
  p.q_values = query_values(rng, tokens * heads, head_dim);
  p.q = float_tensor(q_dtype, {tokens, heads, head_dim}, p.q_values);
  p.weight_values.resize(static_cast<size_t>(tokens * heads));
  for (float& w : p.weight_values) w = rng.normal(2.0f);
  p.weights = float_tensor(weight_dtype, {tokens, heads}, p.weight_values);
  const int64_t table_rows = 37;
  p.table =
      cos_sin_cache(rng.bernoulli(0.5) ? DType::kF32 : DType::kBF16, table_rows, p.table_values);
  p.position_tensor_ = position_tensor(rng, position_dtype, tokens, table_rows, p.positions);
  p.rope.style = rope_case.style;
  p.rope.dims = rope_case.dims;
  if (p.rope.enabled()) {
    p.rope.cos_sin_cache = p.table.view();
    p.rope.positions = p.position_tensor_.view();
  }
  return p;
}

// Head (t, h) of the problem after the reference RoPE.
std::vector<float> rotated_head(const QueryProblem& p, int64_t t, int64_t h) {
  std::vector<float> x(p.q_values.begin() + (t * p.heads + h) * p.head_dim,
                       p.q_values.begin() + (t * p.heads + h + 1) * p.head_dim);
  if (p.rope.enabled()) {
    reference::rope(x.data(), p.head_dim, p.rope.style, p.rope.dims,
                    p.table_values.data() + p.positions[t] * 64);
  }
  return x;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(QueryQuantFp8, MatchesTheReferenceBitForBit) {
  FI_SEEDED_RNG(rng);
  for (DType q_dtype : {DType::kF32, DType::kBF16}) {
    for (int head_dim : {64, 128}) {
      for (const RopeCase& rope_case : kRopeCases) {
        for (float eps : {1e-10f, 1e-4f}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(q_dtype) << " D=" << head_dim << " "
                                            << describe(rope_case) << " eps=" << eps);
          const DType weight_dtype = rng.bernoulli(0.5) ? DType::kF32 : DType::kBF16;
          QueryProblem p = make_problem(rng, 13, 7, head_dim, q_dtype, weight_dtype, rope_case,
                                        rng.bernoulli(0.5) ? DType::kI64 : DType::kI32);
          HostTensor values(DType::kE4M3, {p.tokens, p.heads, head_dim});
          values.fill_bytes(kPoisonByte);
          HostTensor weights_out(DType::kF32, {p.tokens, p.heads});
          QueryQuantOptions quant;
          quant.eps = eps;
          quant.rope = p.rope;
          FI_ASSERT_OK(quantize_query_fp8(values.view(), weights_out.view(), p.q.view(),
                                          p.weights.view(), quant));
          const float weight_scale =
              default_query_weight_scale(head_dim, static_cast<int>(p.heads));
          for (int64_t t = 0; t < p.tokens; ++t) {
            for (int64_t h = 0; h < p.heads; ++h) {
              const std::vector<float> x = rotated_head(p, t, h);
              std::vector<uint8_t> want(head_dim);
              const float want_w = reference::quantize_query_fp8_head(
                  want.data(), x.data(), head_dim, p.weight_values[t * p.heads + h], eps,
                  weight_scale);
              ASSERT_EQ(std::memcmp(want.data(), &values.at<uint8_t>({t, h, 0}), head_dim), 0)
                  << "token " << t << " head " << h;
              ASSERT_TRUE(same_bits(want_w, weights_out.at<float>({t, h})))
                  << "token " << t << " head " << h << ": weight " << weights_out.at<float>({t, h})
                  << ", expected " << want_w;
            }
          }
        }
      }
    }
  }
}

TEST(QueryQuantMxfp4, MatchesTheReferenceBitForBit) {
  FI_SEEDED_RNG(rng);
  for (DType q_dtype : {DType::kF32, DType::kBF16}) {
    for (int head_dim : {64, 128}) {
      for (const RopeCase& rope_case : kRopeCases) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(q_dtype) << " D=" << head_dim << " " << describe(rope_case));
        QueryProblem p =
            make_problem(rng, 11, 5, head_dim, q_dtype, DType::kF32, rope_case, DType::kI64);
        HostTensor values(DType::kE2M1x2, {p.tokens, p.heads, head_dim / 2});
        HostTensor scales(DType::kUE8M0, {p.tokens, p.heads, head_dim / 32});
        HostTensor weights_out(DType::kF32, {p.tokens, p.heads});
        QueryQuantOptions quant;
        quant.weight_scale = 0.375f;
        quant.rope = p.rope;
        FI_ASSERT_OK(quantize_query_mxfp4(values.view(), scales.view(), weights_out.view(),
                                          p.q.view(), p.weights.view(), quant));
        for (int64_t t = 0; t < p.tokens; ++t) {
          for (int64_t h = 0; h < p.heads; ++h) {
            const std::vector<float> x = rotated_head(p, t, h);
            std::vector<uint8_t> want_values(head_dim / 2), want_scales(head_dim / 32);
            const float want_w = reference::quantize_query_mxfp4_head(
                want_values.data(), want_scales.data(), x.data(), head_dim,
                p.weight_values[t * p.heads + h], 0.375f);
            ASSERT_EQ(std::memcmp(want_values.data(), &values.at<uint8_t>({t, h, 0}), head_dim / 2),
                      0)
                << "token " << t << " head " << h;
            ASSERT_EQ(
                std::memcmp(want_scales.data(), &scales.at<uint8_t>({t, h, 0}), head_dim / 32), 0)
                << "token " << t << " head " << h;
            ASSERT_TRUE(same_bits(want_w, weights_out.at<float>({t, h})));
          }
        }
      }
    }
  }
}

// The pairs of spec §2.2, checked without the reference: a quarter turn (cos 0, sin 1) maps
// (x0, x1) to (-x1, x0), so the rotated dims are a known permutation with signs.
TEST(Rope, QuarterTurnPermutesThePairsOfEachStyle) {
  std::vector<float> table(64, 0.0f);
  for (int i = 0; i < 32; ++i) table[32 + i] = 1.0f;  // cos 0, sin 1
  for (RopeDims dims : {RopeDims::kFirst64, RopeDims::kLast64}) {
    const int offset = dims == RopeDims::kLast64 ? 64 : 0;
    std::vector<float> x(128);
    for (int d = 0; d < 128; ++d) x[d] = static_cast<float>(d + 1);
    std::vector<float> neox = x;
    reference::rope(neox.data(), 128, RopeStyle::kNeox, dims, table.data());
    std::vector<float> interleaved = x;
    reference::rope(interleaved.data(), 128, RopeStyle::kInterleaved, dims, table.data());
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(neox[offset + i], -x[offset + 32 + i]);
      EXPECT_EQ(neox[offset + 32 + i], x[offset + i]);
      EXPECT_EQ(interleaved[offset + 2 * i], -x[offset + 2 * i + 1]);
      EXPECT_EQ(interleaved[offset + 2 * i + 1], x[offset + 2 * i]);
    }
    for (int d = 0; d < 64; ++d) {  // the other 64 dims pass through
      EXPECT_EQ(neox[64 - offset + d], x[64 - offset + d]);
      EXPECT_EQ(interleaved[64 - offset + d], x[64 - offset + d]);
    }
  }
}

TEST(QueryQuantFp8, FoldsTheScaleIntoTheWeights) {
  // One head of all 3.0: amax 3, sigma = 2^ceil(log2(3 / 448)) = 2^-7; W = (w sigma) * scale.
  HostTensor q(DType::kF32, {1, 1, 128});
  q.fill<float>(3.0f);
  HostTensor weights(DType::kF32, {1, 1});
  weights.fill<float>(5.0f);
  HostTensor values(DType::kE4M3, {1, 1, 128});
  HostTensor weights_out(DType::kF32, {1, 1});
  QueryQuantOptions quant;
  quant.eps = 1e-10f;
  FI_ASSERT_OK(
      quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant));
  EXPECT_EQ(default_query_weight_scale(128, 1), static_cast<float>(1.0 / std::sqrt(128.0)));
  EXPECT_EQ(weights_out.data<float>()[0], (5.0f * 0x1p-7f) * default_query_weight_scale(128, 1));
  EXPECT_EQ(e4m3_to_float(values.bytes()[0]), 384.0f);  // 3 / 2^-7
}

TEST(QueryQuantFp8, AllZeroHeadTakesTheScaleOfEps) {
  HostTensor q(DType::kBF16, {2, 1, 64});
  q.fill<uint16_t>(0);
  HostTensor weights(DType::kF32, {2, 1});
  weights.fill<float>(1.0f);
  HostTensor values(DType::kE4M3, {2, 1, 64});
  HostTensor weights_out(DType::kF32, {2, 1});
  for (float eps : {1e-10f, 1e-4f}) {
    QueryQuantOptions quant;
    quant.eps = eps;
    quant.weight_scale = 1.0f;
    FI_ASSERT_OK(
        quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant));
    EXPECT_EQ(weights_out.data<float>()[0], pow2_ceil(eps / kE4M3Max)) << "eps " << eps;
  }
}

TEST(QueryQuantFp8, RejectsBadOptionsNamingThem) {
  HostTensor q(DType::kF32, {2, 4, 128});
  HostTensor weights(DType::kF32, {2, 4});
  HostTensor values(DType::kE4M3, {2, 4, 128});
  HostTensor weights_out(DType::kF32, {2, 4});
  HostTensor table(DType::kF32, {8, 64});
  HostTensor positions = i32_tensor({3, 8});
  QueryQuantOptions quant;
  EXPECT_TRUE(IsRejected(
      quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant),
      StatusCode::kInvalidArgument, {"eps"}));
  quant.eps = 1e-10f;
  quant.rope.style = RopeStyle::kNeox;
  quant.rope.cos_sin_cache = table.view();
  quant.rope.positions = positions.view();
  EXPECT_TRUE(IsRejected(
      quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant),
      StatusCode::kInvalidArgument, {"rope.dims"}));
  quant.rope.dims = RopeDims::kLast64;
  EXPECT_TRUE(IsRejected(
      quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant),
      StatusCode::kInvalidArgument, {"rope.positions[1]=8"}));
  HostTensor narrow_table(DType::kF32, {8, 32});
  quant.rope.cos_sin_cache = narrow_table.view();
  EXPECT_TRUE(IsRejected(
      quantize_query_fp8(values.view(), weights_out.view(), q.view(), weights.view(), quant),
      StatusCode::kInvalidArgument, {"rope.cos_sin_cache"}));
  HostTensor q96(DType::kF32, {2, 4, 96});
  HostTensor values96(DType::kE4M3, {2, 4, 96});
  quant.rope = {};
  EXPECT_TRUE(IsRejected(
      quantize_query_fp8(values96.view(), weights_out.view(), q96.view(), weights.view(), quant),
      StatusCode::kInvalidArgument, {"D=96"}));
}

// insert_k_cache with the key's RoPE fused: each written key is the reference's rope, then the
// reference quantizer; skipped rows leave their slots poisoned.
TEST(InsertKCacheRope, MatchesReferenceRopeThenQuantize) {
  FI_SEEDED_RNG(rng);
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    for (const RopeCase& rope_case : kRopeCases) {
      SCOPED_TRACE(::testing::Message() << kformat_name(format) << " " << describe(rope_case));
      const int D = 128, page_size = 16;
      const int64_t pages = 6, keys_count = 40;
      CacheBuffer cache(format, pages, page_size, D,
                        PagedKCache::page_bytes(format, page_size, D) + 20);
      std::vector<float> x = query_values(rng, keys_count, D);
      HostTensor keys = float_tensor(DType::kBF16, {keys_count, D}, x);
      std::vector<int64_t> slot_values(static_cast<size_t>(pages * page_size));
      std::iota(slot_values.begin(), slot_values.end(), 0);
      rng.shuffle(slot_values);
      HostTensor slots(DType::kI64, {keys_count - 3});  // the last rows are graph padding
      for (int64_t i = 0; i < keys_count - 3; ++i) {
        slots.data<int64_t>()[i] = i % 7 == 3 ? -1 : slot_values[i];
      }
      std::vector<float> table_values;
      HostTensor table = cos_sin_cache(DType::kF32, 50, table_values);
      std::vector<int64_t> positions;
      HostTensor position_view = position_tensor(rng, DType::kI32, keys_count, 50, positions);
      KeyInsertOptions insert;
      insert.rope.style = rope_case.style;
      insert.rope.dims = rope_case.dims;
      if (insert.rope.enabled()) {
        insert.rope.cos_sin_cache = table.view();
        insert.rope.positions = position_view.view();
      }
      FI_ASSERT_OK(insert_k_cache(cache.cache(), keys.view(), slots.view(), insert));
      std::vector<bool> written(static_cast<size_t>(pages * page_size), false);
      for (int64_t i = 0; i < keys_count - 3; ++i) {
        const int64_t slot = slots.data<int64_t>()[i];
        if (slot < 0) continue;
        written[slot] = true;
        std::vector<float> key(x.begin() + i * D, x.begin() + (i + 1) * D);
        if (insert.rope.enabled()) {
          reference::rope(key.data(), D, rope_case.style, rope_case.dims,
                          table_values.data() + positions[i] * 64);
        }
        std::vector<uint8_t> values(D), scales(4);
        if (format == KFormat::kFP8) {
          reference::quantize_fp8_row(values.data(), reinterpret_cast<float*>(scales.data()),
                                      key.data(), D);
        } else {
          reference::quantize_mxfp4_row(values.data(), scales.data(), key.data(), D);
        }
        ASSERT_EQ(std::memcmp(cache.base() + cache.values_offset(slot), values.data(),
                              cache.value_bytes()),
                  0)
            << "key " << i << " slot " << slot;
        ASSERT_EQ(std::memcmp(cache.base() + cache.scales_offset(slot), scales.data(),
                              cache.scale_bytes()),
                  0)
            << "key " << i << " slot " << slot;
      }
      for (int64_t slot = 0; slot < pages * page_size; ++slot) {
        if (written[slot]) continue;
        for (int64_t b = 0; b < cache.value_bytes(); ++b) {
          ASSERT_EQ(cache.base()[cache.values_offset(slot) + b], kPoisonByte) << "slot " << slot;
        }
      }
    }
  }
}

TEST(InsertKCacheRope, RejectsAPositionOutsideTheTable) {
  CacheBuffer cache(KFormat::kFP8, 2, 16, 128, PagedKCache::page_bytes(KFormat::kFP8, 16, 128));
  HostTensor keys(DType::kF32, {2, 128});
  HostTensor slots(DType::kI64, {2});
  slots.data<int64_t>()[0] = 3;
  slots.data<int64_t>()[1] = -1;
  HostTensor table(DType::kF32, {4, 64});
  HostTensor positions(DType::kI64, {2});
  positions.data<int64_t>()[0] = 4;
  positions.data<int64_t>()[1] = 99;  // a padding row: not read
  KeyInsertOptions insert;
  insert.rope = {RopeStyle::kInterleaved, RopeDims::kLast64, table.view(), positions.view()};
  EXPECT_TRUE(IsRejected(insert_k_cache(cache.cache(), keys.view(), slots.view(), insert),
                         StatusCode::kInvalidArgument, {"rope.positions[0]=4"}));
  positions.data<int64_t>()[0] = 3;
  FI_EXPECT_OK(insert_k_cache(cache.cache(), keys.view(), slots.view(), insert));
}

}  // namespace
}  // namespace fitest
