// SPDX-License-Identifier: Apache-2.0
// `flashindexer run`: the indexer on the embedded workload, timed and verified.
#pragma once

#include <cstdint>
#include <string>

namespace flashindexer::cli {

struct RunConfig {
  std::string device = "auto";  // auto | cpu | cuda
  std::string preset = "v32";   // a name of presets() in workload.h
  std::string format = "fp8";   // fp8 | mxfp4: the K cache's and the queries' format
  uint64_t seed = 1;
  int verify_rows = 8;  // rows per phase (prefill, decode) checked against the reference
};

// Exit status: 0 when every check passes, 1 on a mismatch, 2 when an op or the device fails.
int run_command(const RunConfig& config);

}  // namespace flashindexer::cli
