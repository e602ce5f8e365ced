// SPDX-License-Identifier: Apache-2.0
// The decode-length tensor ops (planning.h, last section) on CPU tensors: the host planner's
// values for i32 and i64 lengths and strided outputs, its length checks, and the argument
// checks every device shares. The CUDA kernel against the host planner is
// tests/cuda/planning_test.cpp.
#include <cstdint>
#include <vector>

#include "planning/decode_rule.h"
#include "support/compare.h"
#include "support/seed.h"
#include "support/tensors.h"

namespace fitest {
namespace {

TensorView on_cuda(TensorView view) {
  if (view.defined()) view.device = Device::kCUDA;
  return view;
}

TEST(DecodeLensOp, RankLocalLenIsDcpLocalLen) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (int interleave = 1; interleave <= 4; ++interleave) {
      for (int rank = 0; rank < ranks; ++rank) {
        const planning::DecodeRule rule{1, ranks, interleave, rank};
        for (int64_t length = 0; length < 200; ++length) {
          ASSERT_EQ(planning::rank_local_len(length, rule),
                    dcp_local_len(length, rank, DcpGroup{ranks, interleave}))
              << "length " << length << " rank " << rank << " of " << ranks << ", I " << interleave;
        }
      }
    }
  }
}

TEST(DecodeLensOp, CpuTensorsGiveTheHostPlannersValues) {
  FI_SEEDED_RNG(rng);
  for (int trial = 0; trial < 300; ++trial) {
    const int next_n = static_cast<int>(rng.uniform_int(1, 4));
    const int64_t requests = rng.uniform_int(0, 40);
    std::vector<int64_t> seq_lens, query_lens;
    int64_t tokens = 0;
    for (int64_t b = 0; b < requests; ++b) {
      const int64_t d = rng.uniform_int(1, next_n);
      seq_lens.push_back(rng.uniform_int(d, 100000));
      query_lens.push_back(d);
      tokens += d;
    }
    RowBoundsOptions bounds;
    bounds.compress_ratio = static_cast<int>(rng.pick(std::vector<int64_t>{1, 4, 128}));
    if (rng.bernoulli(0.5)) {
      bounds.dcp = {static_cast<int>(rng.uniform_int(2, 8)),
                    static_cast<int>(rng.uniform_int(1, 3))};
      bounds.dcp_rank = static_cast<int>(rng.uniform_int(0, bounds.dcp.ranks - 1));
    }
    const DType dtype = rng.bernoulli(0.5) ? DType::kI64 : DType::kI32;
    const HostTensor seq = lengths_tensor(seq_lens, dtype);
    const HostTensor query = lengths_tensor(query_lens, dtype);

    const int64_t rows = tokens + rng.uniform_int(0, 6);
    std::vector<int32_t> expected_lens(rows), expected_requests(rows);
    FI_ASSERT_OK(
        decode_flat_lens(expected_lens, expected_requests, seq_lens, query_lens, next_n, bounds));
    HostTensor row_lens(DType::kI32, {rows});
    HostTensor row_to_request(DType::kI32, {rows});
    row_lens.fill(kPoisonIndex);
    row_to_request.fill(kPoisonIndex);
    const bool with_requests = rng.bernoulli(0.7);
    FI_ASSERT_OK(decode_flat_lens(row_lens.view(),
                                  with_requests ? row_to_request.view() : TensorView{}, seq.view(),
                                  query.view(), next_n, bounds));
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(row_lens.data<int32_t>()[r], expected_lens[r]) << "row " << r;
      ASSERT_EQ(row_to_request.data<int32_t>()[r],
                with_requests ? expected_requests[r] : kPoisonIndex)
          << "row " << r;
    }

    std::vector<int32_t> expected_native(requests * next_n);
    FI_ASSERT_OK(decode_native_lens(expected_native, seq_lens, next_n, bounds));
    const int64_t row_stride = next_n + rng.uniform_int(0, 3);
    HostTensor lens(DType::kI32, {requests, next_n}, row_stride);
    lens.fill(kPoisonIndex);
    FI_ASSERT_OK(decode_native_lens(lens.view(), seq.view(), next_n, bounds));
    for (int64_t b = 0; b < requests; ++b) {
      for (int64_t j = 0; j < row_stride; ++j) {
        const int32_t want = j < next_n ? expected_native[b * next_n + j] : kPoisonIndex;
        ASSERT_EQ(lens.data<int32_t>()[b * row_stride + j], want) << "[" << b << ", " << j << "]";
      }
    }
  }
}

TEST(DecodeLensOp, CpuTensorsAreCheckedLikeTheHostPlanner) {
  const HostTensor seq = lengths_tensor({10, 3}, DType::kI32);
  const HostTensor too_many = lengths_tensor({3, 1}, DType::kI32);  // 3 > next_n = 2
  HostTensor row_lens(DType::kI32, {4});
  EXPECT_TRUE(IsRejected(decode_flat_lens(row_lens.view(), {}, seq.view(), too_many.view(), 2),
                         StatusCode::kInvalidArgument, {"decode_flat_lens", "query_lens entry 0"}));
  const HostTensor fine = lengths_tensor({2, 2}, DType::kI32);
  HostTensor short_rows(DType::kI32, {3});
  EXPECT_TRUE(IsRejected(decode_flat_lens(short_rows.view(), {}, seq.view(), fine.view(), 2),
                         StatusCode::kInvalidArgument, {"row_lens has 3 entries"}));
  const HostTensor negative = lengths_tensor({-1, 3}, DType::kI64);
  HostTensor lens(DType::kI32, {2, 2});
  EXPECT_TRUE(IsRejected(decode_native_lens(lens.view(), negative.view(), 2),
                         StatusCode::kInvalidArgument, {"seq_lens entry 0"}));
}

TEST(DecodeLensOp, RejectsBadDtypesShapesAndDevices) {
  const HostTensor seq = lengths_tensor({10, 3}, DType::kI32);
  const HostTensor query = lengths_tensor({1, 1}, DType::kI32);
  HostTensor row_lens(DType::kI32, {2});
  HostTensor wide_rows(DType::kI64, {2});
  EXPECT_TRUE(IsRejected(decode_flat_lens(wide_rows.view(), {}, seq.view(), query.view(), 1),
                         StatusCode::kInvalidArgument, {"row_lens"}));
  const HostTensor three = lengths_tensor({1, 1, 1}, DType::kI32);
  EXPECT_TRUE(IsRejected(decode_flat_lens(row_lens.view(), {}, seq.view(), three.view(), 1),
                         StatusCode::kInvalidArgument, {"query_lens"}));
  HostTensor requests(DType::kI32, {3});
  EXPECT_TRUE(
      IsRejected(decode_flat_lens(row_lens.view(), requests.view(), seq.view(), query.view(), 1),
                 StatusCode::kInvalidArgument, {"row_to_request"}));
  EXPECT_TRUE(IsRejectedNamingAnyOf(
      decode_flat_lens(on_cuda(row_lens.view()), {}, seq.view(), query.view(), 1),
      {StatusCode::kInvalidArgument}, {"row_lens"}));
  EXPECT_TRUE(IsRejected(decode_flat_lens(row_lens.view(), {}, seq.view(), query.view(), 0),
                         StatusCode::kInvalidArgument, {"next_n=0"}));
  RowBoundsOptions bad_rank;
  bad_rank.dcp = {2, 1};
  bad_rank.dcp_rank = 2;
  EXPECT_TRUE(
      IsRejected(decode_flat_lens(row_lens.view(), {}, seq.view(), query.view(), 1, bad_rank),
                 StatusCode::kInvalidArgument, {"dcp_rank=2"}));
  HostTensor lens(DType::kI32, {2, 3});
  EXPECT_TRUE(IsRejected(decode_native_lens(lens.view(), seq.view(), 2),
                         StatusCode::kInvalidArgument, {"lens"}));
  HostTensor overlapping(DType::kI32, {2, 2}, 1);
  EXPECT_TRUE(IsRejected(decode_native_lens(overlapping.view(), seq.view(), 2),
                         StatusCode::kInvalidArgument, {"lens"}));
}

}  // namespace
}  // namespace fitest
