// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 candidate-block functions of flashindexer._C (flashindexer/candidates.h).
#pragma once

#include <nanobind/nanobind.h>

namespace flashindexer::python {

// Adds select_candidate_blocks, apply_candidate_mask, candidate_topk_per_row,
// candidate_blocks_to_sparse_indices, sparse_topk_remap and their workspace queries to `m`.
void register_candidates(nanobind::module_& m);

}  // namespace flashindexer::python
