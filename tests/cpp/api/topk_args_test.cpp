// SPDX-License-Identifier: Apache-2.0
// topk_per_row's argument checks (topk.h): every malformed call is rejected with a message
// naming the argument, before any output is written.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "support/compare.h"
#include "topk_runs.h"

namespace fitest {
namespace {

TEST(TopK, RejectsNegativeLength) {
  FI_SEEDED_RNG(rng);
  HostTensor logits = make_logits(rng, DType::kF32, 4, 100, Fill::kRandom);
  HostTensor lengths = i32_tensor({-5, 10, -1, 100});
  HostTensor out = poisoned_topk_output(4, 16);
  const Status status =
      topk_per_row(out.view(), logits.view(), RowRanges::decode(lengths.view()), 16);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("lengths"), std::string::npos) << status.message();
}

// ----------------------------------------------------------------------------- bad input

struct TopKArgs {
  HostTensor logits;
  HostTensor ks;
  HostTensor ke;
  HostTensor out;
  int k = 8;
  Status call() const {
    return call_with(out.view(), logits.view(), RowRanges::prefill(ks.view(), ke.view()), k);
  }
  Status call_with(const TensorView& out_view, const TensorView& logits_view,
                   const RowRanges& ranges, int top_k) const {
    return topk_per_row(out_view, logits_view, ranges, top_k);
  }
};

TopKArgs topk_args() {
  TopKArgs a;
  a.logits = HostTensor(DType::kF32, {4, 100});
  a.logits.fill<float>(1.0f);
  a.ks = i32_tensor({0, 3, 50, 99});
  a.ke = i32_tensor({100, 40, 50, 100});
  a.out = poisoned_topk_output(4, 8);
  return a;
}

TEST(TopK, AcceptsTheValidBaseline) { FI_EXPECT_OK(topk_args().call()); }

TEST(TopK, RejectsLogitsOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor logits(DType::kI32, {4, 100});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsOutputOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor out(DType::kI64, {4, 8});
  EXPECT_TRUE(IsRejected(
      a.call_with(out.view(), a.logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsViewsOfMoreDimensionsThanAViewHolds) {
  // contiguous() with more than kMaxRank extents: a view of that rank, refused by name.
  TopKArgs a = topk_args();
  const TensorView logits =
      TensorView::contiguous(a.logits.view().data, DType::kF32, {1, 1, 1, 1, 1, 1, 4, 100});
  EXPECT_EQ(logits.rank, 8);
  EXPECT_EQ(logits.numel(), 0);
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits has rank 8"}));
}

TEST(TopK, RejectsKZero) {
  TopKArgs a = topk_args();
  a.k = 0;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"k"}));
}

TEST(TopK, RejectsKAboveTheMaximum) {
  TopKArgs a = topk_args();
  a.k = 4097;
  a.out = poisoned_topk_output(4, 4097);
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call(), {StatusCode::kInvalidArgument, StatusCode::kUnsupported}, {"k=4097"}));
}

TEST(TopK, RejectsOutputNarrowerThanK) {
  TopKArgs a = topk_args();
  a.out = poisoned_topk_output(4, 7);
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsOutputRowStrideBelowK) {
  TopKArgs a = topk_args();
  TensorView out = a.out.view();
  out.stride[0] = 7;
  EXPECT_TRUE(
      IsRejected(a.call_with(out, a.logits.view(), RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"out"}));
}

TEST(TopK, RejectsOutputWithOtherRowCount) {
  TopKArgs a = topk_args();
  a.out = poisoned_topk_output(3, 8);
  EXPECT_TRUE(IsRejectedNamingAnyOf(a.call(), {StatusCode::kInvalidArgument}, {"out"}));
}

TEST(TopK, RejectsLogitsInnerStrideOtherThanOne) {
  TopKArgs a = topk_args();
  HostTensor buffer(DType::kF32, {4, 200});
  TensorView logits = buffer.view();
  logits.shape[1] = 100;
  logits.stride[1] = 2;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsLogitsRowStrideBelowWidth) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.stride[0] = 99;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
}

TEST(TopK, RejectsKsGreaterThanKe) {
  TopKArgs a = topk_args();
  a.ks.data<int32_t>()[2] = 51;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsNegativeKs) {
  TopKArgs a = topk_args();
  a.ks.data<int32_t>()[1] = -3;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsKeBeyondTheWidth) {
  TopKArgs a = topk_args();
  a.ke.data<int32_t>()[3] = 101;
  EXPECT_TRUE(IsRejected(a.call(), StatusCode::kInvalidArgument, {"ke"}));
}

TEST(TopK, RejectsRangesOfWrongLength) {
  TopKArgs a = topk_args();
  HostTensor ks = i32_tensor({0, 0, 0});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(ks.view(), a.ke.view()), 8),
      StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsRangesOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor ke(DType::kF32, {4});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(a.ks.view(), ke.view()), 8),
      StatusCode::kInvalidArgument, {"ke"}));
}

TEST(TopK, RejectsDecodeLengthBeyondTheWidth) {
  TopKArgs a = topk_args();
  // The condition involves two arguments: the message may name either.
  HostTensor lengths = i32_tensor({10, 101, 0, 5});
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view()), 8),
      {StatusCode::kInvalidArgument}, {"lengths", "logits"}));
  HostTensor request_lengths = i32_tensor({101, 4});  // next_n = 2: row 1 sees 101 columns
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(request_lengths.view(), 2), 8),
      {StatusCode::kInvalidArgument}, {"lengths", "logits"}));
}

TEST(TopK, RejectsLengthsOfWrongDtype) {
  TopKArgs a = topk_args();
  HostTensor lengths(DType::kF32, {4});
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view()), 8),
                 StatusCode::kInvalidArgument, {"lengths"}));
}

TEST(TopK, RejectsLengthsNotMatchingTheRows) {
  TopKArgs a = topk_args();
  HostTensor lengths = i32_tensor({10, 10, 10});  // neither [rows] nor [rows / next_n]
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view(), 2), 8),
      StatusCode::kInvalidArgument, {"lengths"}));
}

TEST(TopK, RejectsNextNBelowOne) {
  TopKArgs a = topk_args();
  HostTensor lengths = i32_tensor({10, 10, 10, 10});
  EXPECT_TRUE(IsRejected(
      a.call_with(a.out.view(), a.logits.view(), RowRanges::decode(lengths.view(), 0), 8),
      StatusCode::kInvalidArgument, {"next_n"}));
}

TEST(TopK, RejectsNullData) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.data = nullptr;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"logits"}));
  TensorView ks = a.ks.view();
  ks.data = nullptr;
  EXPECT_TRUE(
      IsRejected(a.call_with(a.out.view(), a.logits.view(), RowRanges::prefill(ks, a.ke.view()), 8),
                 StatusCode::kInvalidArgument, {"ks"}));
}

TEST(TopK, RejectsCudaTensorMixedWithCpuTensors) {
  TopKArgs a = topk_args();
  TensorView logits = a.logits.view();
  logits.device = Device::kCUDA;
  const Status status =
      a.call_with(a.out.view(), logits, RowRanges::prefill(a.ks.view(), a.ke.view()), 8);
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.code() == StatusCode::kInvalidArgument ||
              status.code() == StatusCode::kUnsupported)
      << status_text(status);
  for (int64_t i = 0; i < 32; ++i)
    ASSERT_EQ(a.out.data<int32_t>()[i], kPoisonIndex) << "a rejected call wrote out";
}

}  // namespace
}  // namespace fitest
