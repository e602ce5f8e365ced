// SPDX-License-Identifier: Apache-2.0
// The per-token key count of the decode layouts (spec §7.1, localized per §9.1), written once for
// the host planner (decode.cpp), the CPU tensor op and the CUDA kernel that builds the same
// lengths from device-side lengths (src/cuda/planning/), so all three give the same bits.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace flashindexer::planning {

// The decode options a kernel needs, as plain integers (RowBoundsOptions is host-only).
struct DecodeRule {
  int compress_ratio = 1;  // R >= 1
  int dcp_ranks = 1;       // N >= 1
  int dcp_interleave = 1;  // I >= 1
  int dcp_rank = 0;        // 0 <= rank < N
};

// How many of the first `length` keys the rank stores: dist.h's dcp_local_len, restated here
// because that one is not callable on the device. base + clamp(length - base N - r I, 0, I),
// base = (length / (I N)) I.
FI_HOST_DEVICE int64_t rank_local_len(int64_t length, const DecodeRule& rule) {
  if (rule.dcp_ranks == 1) return length;
  const int64_t interleave = rule.dcp_interleave;
  const int64_t base = (length / (interleave * rule.dcp_ranks)) * interleave;
  const int64_t rest = length - base * rule.dcp_ranks - int64_t{rule.dcp_rank} * interleave;
  return base + (rest < 0 ? 0 : rest > interleave ? interleave : rest);
}

// The keys a decode token sees when it sees `visible` positions (uncompressed): floor(visible /
// R), then localized. visible >= 0.
FI_HOST_DEVICE int32_t decode_token_keys(int64_t visible, const DecodeRule& rule) {
  return static_cast<int32_t>(rank_local_len(visible / rule.compress_ratio, rule));
}

// Native layout entry [b, j]: max(0, L_b - next_n + j + 1) positions.
FI_HOST_DEVICE int32_t native_token_keys(int64_t seq_len, int next_n, int j,
                                         const DecodeRule& rule) {
  const int64_t visible = seq_len - next_n + j + 1;
  return decode_token_keys(visible < 0 ? 0 : visible, rule);
}

}  // namespace flashindexer::planning
