// SPDX-License-Identifier: Apache-2.0
// The step-planning functions of flashindexer._C (flashindexer/planning.h).
#pragma once

#include <nanobind/nanobind.h>

namespace flashindexer::python {

// Adds the prefill chunk planner, the prefill row bounds, the decode metadata and the decode row
// ranges to `m`.
void register_planning(nanobind::module_& m);

}  // namespace flashindexer::python
