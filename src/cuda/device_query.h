// SPDX-License-Identifier: Apache-2.0
// What the CUDA runtime says about this build's backend and the visible devices. The CUDA build
// answers from the runtime (device_query.cpp); a build without CUDA answers from stub.cpp, so the
// callers in src/api need no preprocessor switch.
#pragma once

#include <string>

namespace flashindexer::cuda {

// Whether this build has the CUDA backend.
bool backend_built();
// The architectures the kernels are compiled for ("sm_90a"); "" without the backend.
const char* built_archs();
// Visible devices; 0 without a driver or a device (the runtime's sticky error is cleared).
int device_count();
// The current device, or -1 when none can be asked.
int current_device();
// The compute capability of `device`; false when it cannot be queried.
bool compute_capability(int device, int* major, int* minor);
// The device's name, or "" when it cannot be queried.
std::string device_name(int device);

}  // namespace flashindexer::cuda
