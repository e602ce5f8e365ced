// SPDX-License-Identifier: Apache-2.0
// The scoring ops' argument checks (logits.h): every malformed mqa_logits and paged_mqa_logits
// call is rejected with a message naming the argument.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "support/compare.h"

namespace fitest {
namespace {

// ----------------------------------------------------------------------------- bad input

// A valid small prefill call whose arguments each test breaks one at a time.
struct PrefillArgs {
  PrefillProblem p;
  HostTensor logits;
  Status call() const {
    return mqa_logits(logits.view(), p.q.view(), p.keys.view(), p.weights.view(), p.ks.view(),
                      p.ke.view());
  }
  Status call_with(const TensorView& logits_view, const QuantizedTensor& q,
                   const QuantizedTensor& keys, const TensorView& weights, const TensorView& ks,
                   const TensorView& ke) const {
    return mqa_logits(logits_view, q, keys, weights, ks, ke);
  }
};

PrefillArgs prefill_args(KFormat format = KFormat::kFP8, int heads = 32, int head_dim = 128) {
  Rng rng(1234);
  PrefillArgs a{make_prefill_problem(rng, format, 6, 40, heads, head_dim), HostTensor()};
  a.logits = poisoned_logits(6, 40);
  return a;
}

TEST(MqaLogits, AcceptsTheValidBaseline) {
  FI_EXPECT_OK(prefill_args().call());
  FI_EXPECT_OK(prefill_args(KFormat::kMXFP4, 64, 64).call());
}

TEST(MqaLogits, RejectsQueryOfWrongDtype) {
  PrefillArgs a = prefill_args();
  HostTensor q(DType::kF32, {6, 32, 128});
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), {q.view(), {}}, a.p.keys.view(),
                                     a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"q"}));
}

TEST(MqaLogits, RejectsWeightsOfWrongShape) {
  PrefillArgs a = prefill_args();
  HostTensor weights(DType::kF32, {6, 33});
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), a.p.q.view(), a.p.keys.view(), weights.view(),
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"weights"}));
}

TEST(MqaLogits, RejectsWeightsOfWrongDtype) {
  PrefillArgs a = prefill_args();
  HostTensor weights(DType::kBF16, {6, 32});
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), a.p.q.view(), a.p.keys.view(), weights.view(),
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"weights"}));
}

TEST(MqaLogits, RejectsKsGreaterThanKe) {
  PrefillArgs a = prefill_args();
  a.p.ks.data<int32_t>()[3] = 10;
  a.p.ke.data<int32_t>()[3] = 9;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(MqaLogits, RejectsNegativeKs) {
  PrefillArgs a = prefill_args();
  a.p.ks.data<int32_t>()[2] = -1;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(MqaLogits, RejectsKeBeyondTheKeys) {
  PrefillArgs a = prefill_args();
  a.p.ke.data<int32_t>()[4] = 41;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ke"}));
}

TEST(MqaLogits, RejectsKsOfWrongLength) {
  PrefillArgs a = prefill_args();
  HostTensor ks(DType::kI32, {5});
  ks.fill<int32_t>(0);
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), a.p.q.view(), a.p.keys.view(),
                                     a.p.weights.view(), ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"ks"}));
}

TEST(MqaLogits, RejectsLogitsNarrowerThanTheKeys) {
  PrefillArgs a = prefill_args();
  HostTensor logits = poisoned_logits(6, 39);
  EXPECT_TRUE(IsRejected(a.call_with(logits.view(), a.p.q.view(), a.p.keys.view(),
                                     a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"logits"}));
}

TEST(MqaLogits, RejectsLogitsRowStrideBelowWidth) {
  PrefillArgs a = prefill_args();
  TensorView logits = a.logits.view();
  logits.stride[0] = 39;
  EXPECT_TRUE(IsRejected(a.call_with(logits, a.p.q.view(), a.p.keys.view(), a.p.weights.view(),
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"logits"}));
}

TEST(MqaLogits, RejectsLogitsInnerStrideOtherThanOne) {
  PrefillArgs a = prefill_args();
  HostTensor buffer = poisoned_logits(6, 80);
  TensorView logits = buffer.view();
  logits.shape[1] = 40;
  logits.stride[1] = 2;
  EXPECT_TRUE(IsRejected(a.call_with(logits, a.p.q.view(), a.p.keys.view(), a.p.weights.view(),
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"logits"}));
}

TEST(MqaLogits, RejectsLogitsOfWrongDtype) {
  PrefillArgs a = prefill_args();
  HostTensor logits(DType::kBF16, {6, 40});
  EXPECT_TRUE(IsRejected(a.call_with(logits.view(), a.p.q.view(), a.p.keys.view(),
                                     a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"logits"}));
}

TEST(MqaLogits, RejectsUnsupportedHeadCount) {
  PrefillArgs a = prefill_args(KFormat::kFP8, 48, 128);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call(), {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"48"}));
}

TEST(MqaLogits, RejectsUnsupportedHeadDim) {
  for (KFormat format : {KFormat::kFP8, KFormat::kMXFP4}) {
    SCOPED_TRACE(kformat_name(format));
    PrefillArgs a = prefill_args(format, 32, 96);
    EXPECT_TRUE(IsRejectedNamingAnyOf(
        a.call(), {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"96"}));
  }
}

TEST(MqaLogits, RejectsKeyScalesOfWrongDtype) {
  PrefillArgs a = prefill_args();
  HostTensor scales(DType::kUE8M0, {40});
  EXPECT_TRUE(
      IsRejected(a.call_with(a.logits.view(), a.p.q.view(), {a.p.keys.values.view(), scales.view()},
                             a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                 StatusCode::kInvalidArgument, {"keys"}));
}

TEST(MqaLogits, RejectsMxfp4QueryWithoutScales) {
  PrefillArgs a = prefill_args(KFormat::kMXFP4);
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), {a.p.q.values.view(), {}}, a.p.keys.view(),
                                     a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"q"}));
}

TEST(MqaLogits, RejectsKeysWithHeadDimOtherThanQuery) {
  PrefillArgs a = prefill_args();
  Rng rng(7);
  Operand keys = make_keys(rng, KFormat::kFP8, 40, 64);
  EXPECT_TRUE(IsRejectedNamingAnyOf(a.call_with(a.logits.view(), a.p.q.view(), keys.view(),
                                                a.p.weights.view(), a.p.ks.view(), a.p.ke.view()),
                                    {StatusCode::kInvalidArgument}, {"keys", "q"}));
}

TEST(MqaLogits, RejectsNullData) {
  PrefillArgs a = prefill_args();
  TensorView weights = a.p.weights.view();
  weights.data = nullptr;
  EXPECT_TRUE(IsRejected(a.call_with(a.logits.view(), a.p.q.view(), a.p.keys.view(), weights,
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"weights"}));
  TensorView logits = a.logits.view();
  logits.data = nullptr;
  EXPECT_TRUE(IsRejected(a.call_with(logits, a.p.q.view(), a.p.keys.view(), a.p.weights.view(),
                                     a.p.ks.view(), a.p.ke.view()),
                         StatusCode::kInvalidArgument, {"logits"}));
}

TEST(MqaLogits, RejectsCudaTensorMixedWithCpuTensors) {
  // The memory is host memory flagged as CUDA: the op must refuse before touching it.
  PrefillArgs a = prefill_args();
  QuantizedTensor q = a.p.q.view();
  q.values.device = Device::kCUDA;
  const Status status = a.call_with(a.logits.view(), q, a.p.keys.view(), a.p.weights.view(),
                                    a.p.ks.view(), a.p.ke.view());
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == StatusCode::kInvalidArgument ||
              status.code() == StatusCode::kUnsupported)
      << status_text(status);
  for (int64_t i = 0; i < 6 * 40; ++i) {
    ASSERT_EQ(a.logits.data<uint32_t>()[i], kPoisonLogitBits) << "a rejected call wrote logits";
  }
}

// A valid small decode call.
struct DecodeArgs {
  DecodeProblem p;
  HostTensor logits;
  Status call() const {
    return paged_mqa_logits(logits.view(), p.q.view(), p.cache.cache(), p.weights.view(),
                            p.context_lens.view(), p.block_table.view());
  }
};

DecodeArgs decode_args(int heads = 32) {
  Rng rng(4321);
  DecodeConfig config;
  config.heads = heads;
  config.batch = 2;
  config.next_n = 2;
  config.max_len = 150;
  config.page_size = 64;
  DecodeArgs a{make_decode_problem(rng, config, {150, 130}), HostTensor()};
  a.logits = poisoned_logits(a.p.rows(), a.p.width);
  return a;
}

TEST(PagedMqaLogits, AcceptsTheValidBaseline) { FI_EXPECT_OK(decode_args().call()); }

TEST(PagedMqaLogits, RejectsBlockTableEntryOutOfRange) {
  for (int32_t bad : {-1, 0}) {
    DecodeArgs a = decode_args();
    const int32_t entry = bad < 0 ? bad : static_cast<int32_t>(a.p.cache.cache().num_pages);
    SCOPED_TRACE(::testing::Message() << "entry " << entry);
    a.p.block_table.at<int32_t>({0, 2}) = entry;  // request 0 sees 150 keys: page 2 is visible
    EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"block_table"}));
  }
}

TEST(PagedMqaLogits, RejectsPageStrideSmallerThanThePage) {
  DecodeArgs a = decode_args();
  a.p.cache.cache().page_stride_bytes -= 4;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"page_stride"}));
}

TEST(PagedMqaLogits, RejectsPageStrideNotMultipleOf4) {
  DecodeArgs a = decode_args();
  a.p.cache.cache().page_stride_bytes += 2;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"page_stride"}));
}

TEST(PagedMqaLogits, RejectsContextLengthBeyondTheLogitsWidth) {
  DecodeArgs a = decode_args();
  HostTensor logits = poisoned_logits(a.p.rows(), 149);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      paged_mqa_logits(logits.view(), a.p.q.view(), a.p.cache.cache(), a.p.weights.view(),
                       a.p.context_lens.view(), a.p.block_table.view()),
      {StatusCode::kInvalidArgument}, {"context_lens", "logits"}));
}

TEST(PagedMqaLogits, RejectsContextLengthBeyondTheBlockTable) {
  DecodeArgs a = decode_args();
  // The block table has ceil(150 / 64) + 1 = 4 columns: 257 keys need 5 pages.
  a.p.context_lens.data<int32_t>()[1] = 257;
  a.logits = poisoned_logits(a.p.rows(), 300);
  EXPECT_TRUE(IsRejectedNamingAnyOf(a.call(), {StatusCode::kInvalidArgument},
                                    {"block_table", "context_lens"}));
}

TEST(PagedMqaLogits, RejectsContextLensOfWrongShape) {
  DecodeArgs a = decode_args();
  HostTensor lens(DType::kI32, {3});
  lens.fill<int32_t>(10);
  EXPECT_TRUE(IsRejected(paged_mqa_logits(a.logits.view(), a.p.q.view(), a.p.cache.cache(),
                                          a.p.weights.view(), lens.view(), a.p.block_table.view()),
                         StatusCode::kInvalidArgument, {"context_lens"}));
}

TEST(PagedMqaLogits, RejectsWeightsWithRowsOtherThanBTimesNextN) {
  DecodeArgs a = decode_args();
  HostTensor weights(DType::kF32, {a.p.rows() - 1, 32});
  weights.fill<float>(1.0f);
  EXPECT_TRUE(
      IsRejected(paged_mqa_logits(a.logits.view(), a.p.q.view(), a.p.cache.cache(), weights.view(),
                                  a.p.context_lens.view(), a.p.block_table.view()),
                 StatusCode::kInvalidArgument, {"weights"}));
}

TEST(PagedMqaLogits, RejectsQueryOfWrongRank) {
  DecodeArgs a = decode_args();
  QuantizedTensor q = a.p.q.view();
  q.values = view_of(q.values.data, DType::kE4M3, {a.p.rows(), 32, 128});
  EXPECT_TRUE(IsRejected(paged_mqa_logits(a.logits.view(), q, a.p.cache.cache(), a.p.weights.view(),
                                          a.p.context_lens.view(), a.p.block_table.view()),
                         StatusCode::kInvalidArgument, {"q"}));
}

TEST(PagedMqaLogits, RejectsCacheHeadDimOtherThanQuery) {
  DecodeArgs a = decode_args();
  a.p.cache.cache().head_dim = 64;
  EXPECT_TRUE(
      IsRejectedNamingAnyOf(a.call(), {StatusCode::kInvalidArgument}, {"cache", "head_dim"}));
}

TEST(PagedMqaLogits, RejectsUnsupportedHeadCount) {
  DecodeArgs a = decode_args(48);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call(), {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"48"}));
}

TEST(PagedMqaLogits, RejectsNullCache) {
  DecodeArgs a = decode_args();
  a.p.cache.cache().data = nullptr;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"cache"}));
}

TEST(PagedMqaLogits, RejectsCudaCacheWithCpuTensors) {
  DecodeArgs a = decode_args();
  a.p.cache.cache().device = Device::kCUDA;
  const Status status = a.call();
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == StatusCode::kInvalidArgument ||
              status.code() == StatusCode::kUnsupported)
      << status_text(status);
}

}  // namespace
}  // namespace fitest
