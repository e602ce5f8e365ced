// SPDX-License-Identifier: Apache-2.0
// DCP around the indexer, shared by the CPU (tests/cpp/api/dcp_scores_test.cpp) and GPU
// (tests/cuda/dcp_scores_test.cpp) tests: the keys of one request dealt to N ranks (dist.h's
// mapping), each rank's rows seeing the local prefix of their global prefix.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "flashindexer/dist.h"
#include "support/compare.h"

namespace fitest {

// A copy of a contiguous host tensor (HostTensor is move-only).
inline HostTensor copy_tensor(const HostTensor& from) {
  const TensorView& v = from.view();
  std::vector<int64_t> shape(v.shape.begin(), v.shape.begin() + v.rank);
  HostTensor to(v.dtype, shape);
  std::memcpy(to.bytes(), from.bytes(), from.byte_size());
  return to;
}

// Rank `rank`'s keys of `keys` [num_keys, ...]: global key g with dcp_owner(g) == rank at
// dcp_local(g), in global order.
inline Operand shard_keys(const Operand& keys, KFormat format, int head_dim, int64_t num_keys,
                          int rank, const DcpGroup& group) {
  const int64_t local_count = dcp_local_len(num_keys, rank, group);
  Operand local;
  const int64_t vb = value_bytes_per_row(format, head_dim);
  const int64_t sb = scale_bytes_per_row(format, head_dim);
  local.values = HostTensor(keys.values.view().dtype, {local_count, keys.values.size(1)});
  if (format == KFormat::kFP8) {
    local.scales = HostTensor(DType::kF32, {local_count});
  } else {
    local.scales = HostTensor(keys.scales.view().dtype, {local_count, keys.scales.size(1)});
  }
  for (int64_t g = 0; g < num_keys; ++g) {
    if (dcp_owner(g, group) != rank) continue;
    const int64_t l = dcp_local(g, group);
    std::memcpy(local.values.bytes() + l * vb, keys.values.bytes() + g * vb, vb);
    std::memcpy(local.scales.bytes() + l * sb, keys.scales.bytes() + g * sb, sb);
  }
  return local;
}

// Rows of one request at key 0: row t sees its global prefix [0, ends[t]); on rank r the local
// prefix [0, dcp_local_len(ends[t], r)).
inline HostTensor local_row_ends(const HostTensor& global_ke, int rank, const DcpGroup& group) {
  HostTensor local(DType::kI32, {global_ke.size(0)});
  for (int64_t t = 0; t < global_ke.size(0); ++t) {
    local.data<int32_t>()[t] =
        static_cast<int32_t>(dcp_local_len(global_ke.data<int32_t>()[t], rank, group));
  }
  return local;
}

}  // namespace fitest
