// SPDX-License-Identifier: Apache-2.0
// The rank keys of the top-k kernels and the fused indexer's candidate emission: the one
// definition of core/rank_key.h (score keys, thresholds, rank keys and their indices), named in
// the CUDA backend's namespace.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/rank_key.h"

namespace flashindexer::cuda {

using flashindexer::key_threshold;
using flashindexer::number_key;
using flashindexer::rank_key;
using flashindexer::rank_key_index;
using flashindexer::score_key;

}  // namespace flashindexer::cuda
