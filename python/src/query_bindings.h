// SPDX-License-Identifier: Apache-2.0
// The query quantizers (flashindexer/query.h) and the cache writer with fused RoPE in
// flashindexer._C.
#pragma once

#include <nanobind/nanobind.h>

namespace flashindexer::python {

// Adds quantize_query_fp8, quantize_query_mxfp4 and insert_k_cache_rope to `m`.
void register_query(nanobind::module_& m);

}  // namespace flashindexer::python
