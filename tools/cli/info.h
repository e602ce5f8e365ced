// SPDX-License-Identifier: Apache-2.0
// `flashindexer info`: what this build contains and what the machine offers.
#pragma once

namespace flashindexer::cli {

// Prints the version, build configuration, CPU features and visible GPUs; returns 0.
int info_command();

}  // namespace flashindexer::cli
