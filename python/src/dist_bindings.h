// SPDX-License-Identifier: Apache-2.0
// The multi-GPU functions of flashindexer._C (flashindexer/dist.h, flashindexer/nccl.h).
#pragma once

#include <nanobind/nanobind.h>

namespace flashindexer::python {

// Adds dcp_pack_candidates, dcp_merge_topk, the TP row-sharding plan and the NCCL queries to `m`.
void register_dist(nanobind::module_& m);

}  // namespace flashindexer::python
