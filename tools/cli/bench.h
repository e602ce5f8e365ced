// SPDX-License-Identifier: Apache-2.0
// `flashindexer bench`: the CPU backend against the machine's ceilings and a framework baseline.
#pragma once

#include <string>
#include <vector>

namespace flashindexer::cli {

struct BenchConfig {
  std::string device = "cpu";     // cpu | cuda
  std::string preset = "issue";   // issue: the full case list; quick: small shapes (smoke test)
  std::string json_path;          // write the records as a JSON array when set
  std::string baseline = "auto";  // auto: PyTorch CPU, else NumPy, via bench/cpu_baseline.py; none
  // The baseline's interpreter; empty: $FLASHINDEXER_PYTHON, else the project's .venv, else
  // python3.
  std::string python;
  int repeats = 3;
  int threads = 0;                // 0 = the OpenMP default
  std::vector<std::string> only;  // run only the cases whose name contains one of these
};

// Exit status: 0 on success, 2 when an op fails.
int bench_command(const BenchConfig& config);

}  // namespace flashindexer::cli
