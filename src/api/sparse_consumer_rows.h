// SPDX-License-Identifier: Apache-2.0
// The check of a sparse consumer's prebuilt rows metadata, shared by the builders and the
// indexer calls that take it (CandidateInput::sparse_rows).
#pragma once

#include <cstdint>

#include "core/checks.h"
#include "flashindexer/candidates.h"

namespace flashindexer {

// `sparse_rows` ([bytes] u8 on `device`) holds the rows metadata of `rows` rows of these
// candidates (sparse_consumer_rows_size bytes or more); the device must be the GPU.
void check_sparse_rows_buffer(ArgCheck& check, const char* name, const TensorView& sparse_rows,
                              int64_t rows, const CandidateInput& candidates, Device device);

}  // namespace flashindexer
