// SPDX-License-Identifier: Apache-2.0
// flashindexer: the command-line tool (run the embedded workload, describe the build).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/bench.h"
#include "cli/info.h"
#include "cli/run.h"
#include "cli/workload.h"

namespace {

namespace cli = flashindexer::cli;

int parse_and_run(int argc, char** argv) {
  CLI::App app{"FlashIndexer: the sparse-attention indexer of DeepSeek Sparse Attention models"};
  app.name("flashindexer");
  app.require_subcommand(1);

  cli::RunConfig run;
  std::vector<std::string> preset_names;
  for (const cli::Preset& preset : cli::presets()) preset_names.emplace_back(preset.name);
  CLI::App* run_app = app.add_subcommand(
      "run",
      "Score and select on an embedded workload, time it and verify it against the "
      "reference");
  run_app->add_option("--device", run.device, "Device to run on")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  run_app
      ->add_option("--preset", run.preset,
                   "Workload: v32 (DeepSeek-V3.2, H=64 k=2048), v4flash (DeepSeek-V4-Flash, "
                   "H=64 k=512), glm5 (GLM-5, H=32 k=2048), small (H=32 k=64, tiny), v41flash "
                   "(DeepSeek-V4.1-Flash: a candidate source then a consumer layer, H=32 k=512 "
                   "C=2048 cb=8), v41small (the same scheme, tiny, C=12)")
      ->check(CLI::IsMember(preset_names))
      ->capture_default_str();
  run_app
      ->add_option("--format", run.format,
                   "K cache and query format: fp8, or mxfp4 (E2M1 + UE8M0 in FP8-sized pages, "
                   "as DeepSeek-V4 stores it)")
      ->check(CLI::IsMember({"fp8", "mxfp4"}))
      ->capture_default_str();
  run_app->add_option("--seed", run.seed, "Seed of the workload")->capture_default_str();
  run_app
      ->add_option("--verify-rows", run.verify_rows,
                   "Rows per phase (prefill; decode, split over its batches) checked against the "
                   "reference oracle")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();

  CLI::App* info_app =
      app.add_subcommand("info", "Print the version, build, CPU features and visible GPUs");

  cli::BenchConfig bench;
  CLI::App* bench_app = app.add_subcommand(
      "bench",
      "Time the ops on the CPU or the GPU against the device's measured ceilings and a "
      "PyTorch/NumPy baseline");
  bench_app
      ->add_option("--device", bench.device, "Device to benchmark: cpu, or cuda (the current GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  bench_app->add_option("--preset", bench.preset, "Cases: issue (the full list) or quick (small)")
      ->check(CLI::IsMember({"issue", "quick"}))
      ->capture_default_str();
  bench_app->add_option("--json", bench.json_path, "Write the records as a JSON array");
  bench_app
      ->add_option("--baseline", bench.baseline,
                   "auto: PyTorch CPU if importable, else NumPy; none: skip the baseline")
      ->check(CLI::IsMember({"auto", "none"}))
      ->capture_default_str();
  bench_app->add_option("--python", bench.python, "Python interpreter of the baseline")
      ->capture_default_str();
  bench_app->add_option("--repeats", bench.repeats, "Timed runs per op (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  bench_app->add_option("--threads", bench.threads, "CPU threads (0 = the OpenMP default)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  bench_app
      ->add_option("--only", bench.only,
                   "Run only the cases whose name contains this text, or one of these "
                   "comma-separated texts (e.g. \"decode\" or \"H=32,topk\")")
      ->delimiter(',');

  CLI11_PARSE(app, argc, argv);
  if (run_app->parsed()) return cli::run_command(run);
  if (bench_app->parsed()) return cli::bench_command(bench);
  if (info_app->parsed()) return cli::info_command();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // The library reports errors by Status; only the standard library (allocation) can throw.
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 2;
  }
}
