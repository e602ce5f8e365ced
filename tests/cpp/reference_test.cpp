// SPDX-License-Identifier: Apache-2.0
// The oracle itself (src/reference): its logits against a direct loop written here from the
// formula of logits.h, over operands dequantized by the public dequantizers; its order.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

// Rows of an operand dequantized to floats by the public dequantizers: [rows, D]. FP8 keys
// have their (power-of-two) scale folded in, which is exact; FP8 queries have none.
std::vector<float> dequantized_rows(const Operand& op, KFormat format, int64_t rows, int head_dim) {
  std::vector<float> out(static_cast<size_t>(rows * head_dim));
  TensorView out_view = view_of(out.data(), DType::kF32, {rows, head_dim});
  if (format == KFormat::kFP8) {
    TensorView values = view_of(op.values.view().data, DType::kE4M3, {rows, head_dim});
    std::vector<float> ones(static_cast<size_t>(rows), 1.0f);
    TensorView scales = op.scales.view().defined()
                            ? view_of(op.scales.view().data, DType::kF32, {rows})
                            : view_of(ones.data(), DType::kF32, {rows});
    const Status status = dequantize_k_fp8(out_view, values, scales);
    EXPECT_TRUE(status.ok()) << status_text(status);
  } else {
    TensorView values = view_of(op.values.view().data, DType::kE2M1x2, {rows, head_dim / 2});
    TensorView scales =
        view_of(op.scales.view().data, DType::kUE8M0, {rows, head_dim / kMxfp4BlockSize});
    const Status status = dequantize_mxfp4(out_view, values, scales);
    EXPECT_TRUE(status.ok()) << status_text(status);
  }
  return out;
}

// logit = sum_h W_h * relu(q_h . k), in fp64, with the magnitude sum_h |W_h| sum_d |q_hd k_d|.
reference::Score direct_score(const float* heads, const float* weights, const float* key,
                              int num_heads, int head_dim) {
  reference::Score score{0.0, 0.0};
  for (int h = 0; h < num_heads; ++h) {
    double dot = 0.0;
    double dot_magnitude = 0.0;
    for (int d = 0; d < head_dim; ++d) {
      const double product = static_cast<double>(heads[h * head_dim + d]) * key[d];
      dot += product;
      dot_magnitude += std::fabs(product);
    }
    score.value += weights[h] * (dot > 0.0 ? dot : 0.0);
    score.magnitude += std::fabs(weights[h]) * dot_magnitude;
  }
  return score;
}

// Two fp64 evaluations of the same sum differ by at most (D + H + 2) * 2^-53 * magnitude each.
double fp64_slack(int head_dim, int heads, double magnitude) {
  return 2.0 * (head_dim + heads + 2) * std::ldexp(1.0, -53) * magnitude;
}

// A logits entry of the reference (fp64 rounded once to fp32) against the direct value.
::testing::AssertionResult ReferenceLogitMatches(float got, const reference::Score& direct,
                                                 int head_dim, int heads) {
  const double tolerance =
      std::ldexp(std::fabs(direct.value), -24) + fp64_slack(head_dim, heads, direct.magnitude);
  if (std::fabs(static_cast<double>(got) - direct.value) <= tolerance)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "reference " << got << " vs direct " << direct.value
                                       << " (tolerance " << tolerance << ")";
}

TEST(ReferenceLogits, PrefillMatchesDirectLoop) {
  FI_SEEDED_RNG(rng);
  for (const OperandCase& c : kOperandCases) {
    SCOPED_TRACE(::testing::Message()
                 << kformat_name(c.format) << " H=" << c.heads << " D=" << c.head_dim);
    const int64_t M = 9;
    const int64_t N = 150;
    PrefillProblem p = make_prefill_problem(rng, c.format, M, N, c.heads, c.head_dim);
    const std::vector<float> heads = dequantized_rows(p.q, c.format, M * c.heads, c.head_dim);
    const std::vector<float> keys = dequantized_rows(p.keys, c.format, N, c.head_dim);
    for (bool clean : {true, false}) {
      SCOPED_TRACE(clean ? "clean" : "not clean");
      HostTensor logits = poisoned_logits(M, N + 3, N + 8);
      reference::mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                            p.ke.view(), clean);
      for (int64_t t = 0; t < M; ++t) {
        const int64_t start = p.ks.data<int32_t>()[t];
        const int64_t end = p.ke.data<int32_t>()[t];
        for (int64_t s = 0; s < N + 8; ++s) {
          const float got = logits.at<float>({t, s});
          if (s >= start && s < end) {
            const reference::Score direct = direct_score(
                &heads[t * c.heads * c.head_dim], &p.weights.data<float>()[t * c.heads],
                &keys[s * c.head_dim], c.heads, c.head_dim);
            ASSERT_TRUE(ReferenceLogitMatches(got, direct, c.head_dim, c.heads))
                << "row " << t << " key " << s;
            const reference::Score score =
                reference::prefill_score(p.q.view(), p.keys.view(), p.weights.view(), t, s);
            ASSERT_LE(std::fabs(score.value - direct.value),
                      fp64_slack(c.head_dim, c.heads, direct.magnitude));
            ASSERT_NEAR(score.magnitude, direct.magnitude, 1e-12 * direct.magnitude);
          } else if (clean && s < N + 3) {
            ASSERT_EQ(float_bits(got), float_bits(-kInf)) << "row " << t << " column " << s;
          } else {
            ASSERT_EQ(float_bits(got), kPoisonLogitBits) << "row " << t << " column " << s;
          }
        }
      }
    }
  }
}

TEST(ReferenceLogits, PagedMatchesDirectLoop) {
  FI_SEEDED_RNG(rng);
  int config_index = 0;
  for (const OperandCase& c : kOperandCases) {
    for (bool two_dim : {false, true}) {
      for (int next_n = 1; next_n <= 4; ++next_n) {
        DecodeConfig config;
        config.format = c.format;
        config.heads = c.heads;
        config.head_dim = c.head_dim;
        config.batch = 2;
        config.next_n = next_n;
        config.two_dim_lens = two_dim;
        config.page_size = (config_index++ % 2 == 0) ? 32 : 64;
        config.max_len = 90;
        config.stride_pad_bytes = 4 * rng.uniform_int(0, 8);
        SCOPED_TRACE(::testing::Message()
                     << kformat_name(c.format) << " H=" << c.heads << " D=" << c.head_dim
                     << " next_n=" << next_n
                     << (two_dim ? " context_lens [B, next_n]" : " context_lens [B]"));
        DecodeProblem p = make_decode_problem(rng, config, {static_cast<int32_t>(next_n - 1)});
        const std::vector<float> heads =
            dequantized_rows(p.q, c.format, p.rows() * c.heads, c.head_dim);
        std::vector<std::vector<float>> keys;
        for (int b = 0; b < config.batch; ++b) {
          keys.push_back(dequantized_rows(p.request_keys[b], c.format, p.stored[b], c.head_dim));
        }
        for (bool clean : {true, false}) {
          HostTensor logits = poisoned_logits(p.rows(), p.width, p.width + 5);
          reference::paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                                      p.context_lens.view(), p.block_table.view(), clean);
          for (int64_t r = 0; r < p.rows(); ++r) {
            const int64_t b = r / next_n;
            const reference::Range range =
                reference::decode_range(p.context_lens.view(), next_n, r);
            ASSERT_EQ(range.start, 0);
            ASSERT_EQ(range.end, p.ends[r]) << "visible end of row " << r;
            for (int64_t s = 0; s < p.width + 5; ++s) {
              const float got = logits.at<float>({r, s});
              if (s < p.ends[r]) {
                const reference::Score direct = direct_score(
                    &heads[r * c.heads * c.head_dim], &p.weights.data<float>()[r * c.heads],
                    &keys[b][s * c.head_dim], c.heads, c.head_dim);
                ASSERT_TRUE(ReferenceLogitMatches(got, direct, c.head_dim, c.heads))
                    << "row " << r << " position " << s;
              } else if (clean && s < p.width) {
                ASSERT_EQ(float_bits(got), float_bits(-kInf)) << "row " << r << " column " << s;
              } else {
                ASSERT_EQ(float_bits(got), kPoisonLogitBits) << "row " << r << " column " << s;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ReferenceTopK, OrdersNanBelowNegativeInfinityAndZerosByIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(reference::ranks_before(-kInf, 9, nan, 0));
  EXPECT_FALSE(reference::ranks_before(nan, 0, -kInf, 9));
  EXPECT_TRUE(reference::ranks_before(nan, 1, -nan, 2));
  EXPECT_TRUE(reference::ranks_before(-0.0f, 1, 0.0f, 2));
  EXPECT_TRUE(reference::ranks_before(0.0f, 1, -0.0f, 2));
  EXPECT_TRUE(reference::ranks_before(2.0f, 7, 1.0f, 3));
  const std::vector<int32_t> best =
      reference::topk_of_scores({1.0f, nan, 3.0f, -kInf, 3.0f, 0.0f}, 5);
  EXPECT_EQ(best, (std::vector<int32_t>{2, 4, 0, 5, 3}));
}

}  // namespace
}  // namespace fitest
