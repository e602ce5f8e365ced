// SPDX-License-Identifier: Apache-2.0
// `flashindexer bench`: times the ops on a fixed case list, on the CPU or on the GPU, next to the
// device's ceilings measured in the same process and to what a user would otherwise run
// (bench/cpu_baseline.py on the same inputs, written to a temporary folder and run as a child
// process: PyTorch CPU when importable, else NumPy; with --device cuda, PyTorch on the GPU).
// The baseline's interpreter is --python, else $FLASHINDEXER_PYTHON, else the project's own
// environment (.venv, which `make test` creates with NumPy), else python3.
#include "cli/bench.h"

#include <fmt/core.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/ceilings.h"
#include "cli/device_memory.h"
#include "flashindexer/flashindexer.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer::cli {
namespace {

constexpr int kDim = 128;
constexpr int kPageSize = 64;

struct Case {
  std::string name;
  std::string mode;  // prefill | decode | topk
  int64_t rows;
  int64_t keys;  // per row: the chunk's keys (prefill), each request's context (decode)
  int heads;
  int k;
};

std::vector<Case> cases_of(const std::string& preset) {
  const bool quick = preset == "quick";
  const int64_t prefill_rows = quick ? 32 : 512, prefill_keys = quick ? 4096 : 32768;
  const int64_t decode_rows = quick ? 4 : 16, decode_keys = quick ? 8192 : 65536;
  const int64_t topk_rows = quick ? 32 : 512, topk_keys = quick ? 16384 : 131072;
  std::vector<Case> cases;
  for (int heads : {64, 32}) {
    for (int k : {2048, 512}) {
      cases.push_back({fmt::format("prefill {}x{} H={} k={}", prefill_rows, prefill_keys, heads, k),
                       "prefill", prefill_rows, prefill_keys, heads, k});
      cases.push_back({fmt::format("decode {}x{} H={} k={}", decode_rows, decode_keys, heads, k),
                       "decode", decode_rows, decode_keys, heads, k});
    }
  }
  for (int k : {2048, 512}) {
    cases.push_back({fmt::format("topk {}x{} f32 k={}", topk_rows, topk_keys, k), "topk", topk_rows,
                     topk_keys, 0, k});
  }
  return cases;
}

double median_of(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double median_ms(const std::function<void()>& run, int repeats) {
  run();  // warm-up: first touch of outputs and workspace
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  return median_of(times);
}

void require(const Status& status) {
  if (!status.ok()) throw std::runtime_error(status.message());
}

#ifdef FLASHINDEXER_WITH_CUDA
void require_cuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(error)));
  }
}

// GPU time of one call: CUDA events around kCallsPerRepeat back-to-back calls on the default
// stream (warm caches, launch cost included as a caller pays it), median over the repeats.
double cuda_median_ms(const std::function<void()>& run, int repeats) {
  constexpr int kCallsPerRepeat = 10;
  run();
  require_cuda(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    cudaEventRecord(start);
    for (int c = 0; c < kCallsPerRepeat; ++c) run();
    cudaEventRecord(stop);
    require_cuda(cudaEventSynchronize(stop), "timed calls");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(static_cast<double>(ms) / kCallsPerRepeat);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return median_of(times);
}
#endif

template <typename T>
void write_file(const std::filesystem::path& path, const std::vector<T>& values) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(values.data()),
             static_cast<std::streamsize>(values.size() * sizeof(T)));
}

// Quantized inputs of one scoring case, plus their dequantized f32 form for the baseline.
struct ScoringInputs {
  std::vector<uint8_t> q;         // [rows, H, D] e4m3 (scale folded into weights)
  std::vector<float> weights;     // [rows, H]
  std::vector<uint8_t> keys;      // [key_rows * N, D] e4m3
  std::vector<float> key_scales;  // [key_rows * N]
  std::vector<int32_t> ks, ke;    // [rows]
};

void quantize_rows(std::vector<uint8_t>& values, std::vector<float>& scales,
                   std::vector<float>& input, int64_t rows) {
  values.resize(rows * kDim);
  scales.resize(rows);
  require(quantize_k_fp8(TensorView::contiguous(values.data(), DType::kE4M3, {rows, kDim}),
                         TensorView::contiguous(scales.data(), DType::kF32, {rows}),
                         TensorView::contiguous(input.data(), DType::kF32, {rows, kDim})));
}

ScoringInputs make_inputs(const Case& c, std::mt19937_64& rng) {
  ScoringInputs in;
  std::normal_distribution<float> normal;
  const int64_t key_rows = c.mode == "decode" ? c.rows : 1;
  std::vector<float> keys(key_rows * c.keys * kDim);
  // A shared mean direction gives every row's scores a common offset, as real keys do.
  std::vector<float> mean(kDim);
  for (float& x : mean) x = normal(rng);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = normal(rng) + 0.5f * mean[i % kDim];
  quantize_rows(in.keys, in.key_scales, keys, key_rows * c.keys);
  std::vector<float> q(c.rows * c.heads * kDim);
  for (float& x : q) x = normal(rng);
  std::vector<float> q_scales;
  quantize_rows(in.q, q_scales, q, c.rows * c.heads);
  in.weights.resize(c.rows * c.heads);
  for (size_t i = 0; i < in.weights.size(); ++i) in.weights[i] = normal(rng) * q_scales[i];
  for (int64_t t = 0; t < c.rows; ++t) {
    // Prefill: the chunk's last rows, causal (the anchors' layout). Decode: whole contexts.
    in.ks.push_back(0);
    in.ke.push_back(static_cast<int32_t>(c.mode == "decode" ? c.keys : c.keys - c.rows + t + 1));
  }
  return in;
}

std::vector<float> dequantized(const std::vector<uint8_t>& values, int64_t rows) {
  std::vector<float> out(rows * kDim);
  std::vector<float> ones(rows, 1.0f);
  require(dequantize_k_fp8(
      TensorView::contiguous(out.data(), DType::kF32, {rows, kDim}),
      TensorView::contiguous(const_cast<uint8_t*>(values.data()), DType::kE4M3, {rows, kDim}),
      TensorView::contiguous(ones.data(), DType::kF32, {rows})));
  return out;
}

struct Record {
  std::string name, op;
  double median_ms = 0;
  double work = 0;       // FLOP (scoring) or bytes (top-k)
  std::string unit;      // FLOP | bytes
  double rate = 0;       // GFLOP/s or GB/s
  double fraction = 0;   // of the relevant ceiling
  std::string baseline;  // torch | numpy | none
  double baseline_ms = 0;
};

// The baseline's interpreter: --python, else $FLASHINDEXER_PYTHON, else the project's .venv,
// else python3 from PATH.
std::string baseline_python(const BenchConfig& config) {
  if (!config.python.empty()) return config.python;
  if (const char* python = std::getenv("FLASHINDEXER_PYTHON"); python != nullptr && *python) {
    return python;
  }
  const std::filesystem::path venv =
      std::filesystem::path(FLASHINDEXER_SOURCE_DIR) / ".venv" / "bin" / "python";
  std::error_code error;
  if (std::filesystem::exists(venv, error)) return venv.string();
  return "python3";
}

// Whether `python -c code` exits 0 (its output discarded).
bool python_runs(const std::string& python, const std::string& code) {
  const std::string command = fmt::format("'{}' -c '{}' >/dev/null 2>&1", python, code);
  FILE* pipe = popen(command.c_str(), "r");
  return pipe != nullptr && pclose(pipe) == 0;
}

// The interpreter the baseline runs with, or "" (after one line saying what to install) when
// it lacks what the baseline needs: NumPy, and for --device cuda PyTorch with a visible GPU.
std::string usable_baseline_python(const BenchConfig& config) {
  if (config.baseline == "none") return "";
  const std::string python = baseline_python(config);
  if (!python_runs(python, "import numpy")) {
    fmt::print(stderr,
               "baseline needs numpy, which {} lacks: {} -m pip install numpy, or run `make test` "
               "first (its .venv has it), or pass --python; running without the baseline\n",
               python, python);
    return "";
  }
  if (config.device == "cuda" &&
      !python_runs(python, "import torch, sys; sys.exit(not torch.cuda.is_available())")) {
    fmt::print(stderr,
               "baseline --device cuda needs PyTorch with CUDA, which {} lacks: {} -m pip "
               "install torch, or pass --python; running without the baseline\n",
               python, python);
    return "";
  }
  return python;
}

// Runs the baseline script with `python` on the inputs in `folder`; returns {name, median ms}.
std::pair<std::string, double> run_baseline(const BenchConfig& config, const std::string& python,
                                            const Case& c, const std::filesystem::path& folder,
                                            int threads) {
  if (config.baseline == "none") return {"none", 0.0};
  if (python.empty()) return {"unavailable", 0.0};
  const std::string command = fmt::format(
      "'{}' {}/bench/cpu_baseline.py --dir {} --mode {} --rows {} --keys {} --heads {} "
      "--dim {} --k {} --repeats {} --threads {} --device {} 2>&1",
      python, FLASHINDEXER_SOURCE_DIR, folder.string(), c.mode, c.rows, c.keys, c.heads, kDim, c.k,
      config.repeats, threads, config.device);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"unavailable", 0.0};
  std::string output;
  char buffer[512];
  while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  if (pclose(pipe) != 0) {
    fmt::print(stderr, "baseline unavailable for {}: {}\n", c.name, output);
    return {"unavailable", 0.0};
  }
  const auto find = [&](const std::string& key) {
    const size_t at = output.find("\"" + key + "\": ");
    return at == std::string::npos ? std::string() : output.substr(at + key.size() + 4);
  };
  const std::string name = find("baseline");
  const std::string ms = find("median_ms");
  return {name.substr(1, name.find('"', 1) - 1), std::stod(ms)};
}

}  // namespace

int bench_command(const BenchConfig& config) {
  const bool cuda = config.device == "cuda";
  const int threads = config.threads > 0 ? config.threads : omp_get_max_threads();
  // The ceilings a rate is measured against: FLOP/s (scoring) and bytes/s (top-k).
  double flop_ceiling = 0, byte_ceiling = 0;  // GFLOP/s, GB/s
  if (cuda) {
#ifdef FLASHINDEXER_WITH_CUDA
    if (cuda_device_count() == 0) {
      fmt::print(stderr, "bench --device cuda: no CUDA device is visible\n");
      return 2;
    }
    int device = 0;
    if (const cudaError_t error = cudaGetDevice(&device); error != cudaSuccess) {
      fmt::print(stderr, "bench --device cuda: no current device ({})\n",
                 cudaGetErrorString(error));
      return 2;
    }
    if (std::string refusal; !cuda_device_runs_kernels(device, &refusal)) {
      fmt::print(stderr, "bench --device cuda: {}\n", refusal);
      return 2;
    }
    const CudaCeilings ceilings = measure_cuda_ceilings();
    flop_ceiling = ceilings.fp8_tflops * 1e3;
    byte_ceiling = ceilings.copy_gbytes;
    fmt::print("flashindexer bench: cuda, {} ({} SMs)\n", ceilings.name, ceilings.sms);
    fmt::print(
        "ceilings (same process): FP8 wgmma {:.0f} TFLOP/s, device copy {:.0f} GB/s "
        "(read + write)\n\n",
        ceilings.fp8_tflops, ceilings.copy_gbytes);
#else
    fmt::print(stderr, "bench --device cuda: this build has no CUDA backend\n");
    return 2;
#endif
  } else {
    const Ceilings ceilings = measure_ceilings(threads);
    flop_ceiling = ceilings.fma_gflops;
    byte_ceiling = ceilings.read_gbytes;
    fmt::print("flashindexer bench: cpu, {} threads, SIMD target {}\n", threads,
               ceilings.simd_target);
    fmt::print("ceilings (same process): fp32 FMA {:.1f} GFLOP/s, streaming read {:.1f} GB/s\n\n",
               ceilings.fma_gflops, ceilings.read_gbytes);
  }
  const Device device = cuda ? Device::kCUDA : Device::kCPU;
  const std::string python = usable_baseline_python(config);
  std::mt19937_64 rng(2026);
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / fmt::format("flashindexer-bench-{}", getpid());
  std::filesystem::create_directories(folder);
  std::vector<Record> records;

  for (const Case& c : cases_of(config.preset)) {
    const auto names_case = [&](const std::string& part) {
      return c.name.find(part) != std::string::npos;
    };
    if (!config.only.empty() && std::none_of(config.only.begin(), config.only.end(), names_case)) {
      continue;
    }
    DeviceMemory memory(device);  // the case's inputs, outputs and workspace
    RunOptions options;
    options.cpu_threads = threads;
    if (cuda) {  // the CUDA indexer and top-k take their scratch from the workspace
      options.workspace_bytes = std::max(indexer_cuda_workspace_size(c.k),
                                         topk_per_row_cuda_workspace_size(c.rows, c.keys, c.k));
      require(memory.allocate(&options.workspace, options.workspace_bytes));
    }
    std::vector<std::pair<std::string, std::function<void()>>> ops;
    double flop = 0, bytes = 0;
    ScoringInputs in;
    std::vector<float> logits;
    std::vector<int32_t> lengths;
    TensorView out_view;
    require(allocate_view(&out_view, memory, DType::kI32, {c.rows, c.k}, 0));
    if (c.mode == "topk") {
      logits.resize(c.rows * c.keys);
      std::normal_distribution<float> normal;
      for (float& x : logits) x = normal(rng);
      write_file(folder / "logits.bin", logits);
      bytes = static_cast<double>(logits.size() * sizeof(float));
      lengths.assign(c.rows, static_cast<int32_t>(c.keys));
      TensorView logits_view, lengths_view;
      require(upload_view(&logits_view, memory, logits, DType::kF32, {c.rows, c.keys}));
      require(upload_view(&lengths_view, memory, lengths, DType::kI32, {c.rows}));
      const RowRanges ranges = RowRanges::decode(lengths_view);
      ops.emplace_back("topk_per_row", [&, logits_view, ranges] {
        require(topk_per_row(out_view, logits_view, ranges, c.k, {}, options));
      });
    } else {
      in = make_inputs(c, rng);
      int64_t pairs = 0;
      for (int64_t t = 0; t < c.rows; ++t) pairs += in.ke[t] - in.ks[t];
      flop = 2.0 * pairs * c.heads * kDim;
      QuantizedTensor q;
      if (c.mode == "decode") {
        require(upload_view(&q.values, memory, in.q, DType::kE4M3, {c.rows, 1, c.heads, kDim}));
      } else {
        require(upload_view(&q.values, memory, in.q, DType::kE4M3, {c.rows, c.heads, kDim}));
      }
      TensorView weights, logits_view;
      require(upload_view(&weights, memory, in.weights, DType::kF32, {c.rows, c.heads}));
      require(allocate_view(&logits_view, memory, DType::kF32, {c.rows, c.keys}, 0));
      if (c.mode == "prefill") {
        QuantizedTensor keys;
        TensorView ks, ke;
        require(upload_view(&keys.values, memory, in.keys, DType::kE4M3, {c.keys, kDim}));
        require(upload_view(&keys.scales, memory, in.key_scales, DType::kF32, {c.keys}));
        require(upload_view(&ks, memory, in.ks, DType::kI32, {c.rows}));
        require(upload_view(&ke, memory, in.ke, DType::kI32, {c.rows}));
        ops.emplace_back("mqa_logits", [&, q, keys, weights, ks, ke, logits_view] {
          require(mqa_logits(logits_view, q, keys, weights, ks, ke, {.clean = false}, options));
        });
        ops.emplace_back("indexer_prefill", [&, q, keys, weights, ks, ke] {
          require(indexer_prefill(out_view, q, keys, weights, ks, ke, c.k, {}, options));
        });
      } else {
        // The paged cache: every request's keys in its own shuffled pages.
        const int64_t pages_per_row = c.keys / kPageSize;
        const int64_t num_pages = pages_per_row * c.rows;
        const int64_t page_stride = PagedKCache::page_bytes(KFormat::kFP8, kPageSize, kDim);
        std::vector<uint8_t> cache_bytes(num_pages * page_stride);
        std::vector<int32_t> block_table(num_pages);
        for (int64_t p = 0; p < num_pages; ++p) block_table[p] = static_cast<int32_t>(p);
        std::shuffle(block_table.begin(), block_table.end(), rng);
        for (int64_t key = 0; key < c.rows * c.keys; ++key) {
          const int64_t request = key / c.keys, position = key % c.keys;
          uint8_t* page = cache_bytes.data() +
                          block_table[request * pages_per_row + position / kPageSize] * page_stride;
          std::copy_n(&in.keys[key * kDim], kDim, page + (position % kPageSize) * kDim);
          std::copy_n(reinterpret_cast<const uint8_t*>(&in.key_scales[key]), 4,
                      page + kPageSize * kDim + (position % kPageSize) * 4);
        }
        PagedKCache cache;
        require(memory.upload(&cache.data, cache_bytes.data(), cache_bytes.size()));
        cache.device = device;
        cache.num_pages = num_pages;
        cache.page_size = kPageSize;
        cache.head_dim = kDim;
        cache.page_stride_bytes = page_stride;
        lengths.assign(c.rows, static_cast<int32_t>(c.keys));
        TensorView lens, table;
        require(upload_view(&lens, memory, lengths, DType::kI32, {c.rows}));
        require(upload_view(&table, memory, block_table, DType::kI32, {c.rows, pages_per_row}));
        ops.emplace_back("paged_mqa_logits", [&, q, cache, weights, lens, table, logits_view] {
          require(paged_mqa_logits(logits_view, q, cache, weights, lens, table, {.clean = false},
                                   options));
        });
        ops.emplace_back("indexer_decode", [&, q, cache, weights, lens, table] {
          require(indexer_decode(out_view, q, cache, weights, lens, table, c.k, {}, options));
        });
      }
      const int64_t key_rows = c.mode == "decode" ? c.rows : 1;
      write_file(folder / "q.bin", dequantized(in.q, c.rows * c.heads));
      write_file(folder / "keys.bin", dequantized(in.keys, key_rows * c.keys));
      write_file(folder / "kscale.bin", in.key_scales);
      write_file(folder / "weights.bin", in.weights);
      write_file(folder / "ks.bin", in.ks);
      write_file(folder / "ke.bin", in.ke);
    }
    const auto [baseline, baseline_ms] = run_baseline(config, python, c, folder, threads);
    for (const auto& [op, run] : ops) {
      // Scoring alone has no top-k: its baseline is the end-to-end one only when it is an
      // indexer op or the top-k op itself.
      const bool end_to_end = op.rfind("indexer", 0) == 0 || op == "topk_per_row";
      Record record;
      record.name = c.name;
      record.op = op;
#ifdef FLASHINDEXER_WITH_CUDA
      record.median_ms =
          cuda ? cuda_median_ms(run, std::max(config.repeats, 5)) : median_ms(run, config.repeats);
#else
      record.median_ms = median_ms(run, config.repeats);
#endif
      const bool is_topk = op == "topk_per_row";
      record.work = is_topk ? bytes : flop;
      record.unit = is_topk ? "bytes" : "FLOP";
      record.rate = record.work / (record.median_ms * 1e6);
      record.fraction = record.rate / (is_topk ? byte_ceiling : flop_ceiling);
      record.baseline = end_to_end ? baseline : "none";
      record.baseline_ms = end_to_end ? baseline_ms : 0.0;
      records.push_back(record);
    }
  }
  std::filesystem::remove_all(folder);

  fmt::print(
      "| case | op | ours ms | rate | fraction of ceiling | baseline | baseline ms | "
      "speedup |\n|---|---|---|---|---|---|---|---|\n");
  for (const Record& r : records) {
    // GPU FLOP rates read better in TFLOP/s.
    const bool tflops = cuda && r.unit == "FLOP";
    fmt::print("| {} | {} | {:.3f} | {:.1f} {} | {:.2f} | {} | {} | {} |\n", r.name, r.op,
               r.median_ms, tflops ? r.rate / 1e3 : r.rate,
               r.unit == "bytes" ? "GB/s"
               : tflops          ? "TFLOP/s"
                                 : "GFLOP/s",
               r.fraction, r.baseline,
               r.baseline_ms > 0 ? fmt::format("{:.3f}", r.baseline_ms) : "-",
               r.baseline_ms > 0 ? fmt::format("{:.1f}x", r.baseline_ms / r.median_ms) : "-");
  }
  if (!config.json_path.empty()) {
    std::ofstream file(config.json_path);
    file << "[\n";
    for (size_t i = 0; i < records.size(); ++i) {
      const Record& r = records[i];
      file << fmt::format(
          "  {{\"name\": \"{}\", \"device\": \"{}\", \"op\": \"{}\", \"median_ms\": {:.6f}, "
          "\"work\": {:.0f}, \"work_unit\": \"{}\", \"fraction_of_ceiling\": {:.4f}, "
          "\"ceiling\": {:.3f}, \"baseline\": \"{}\", \"baseline_ms\": {}}}{}\n",
          r.name, config.device, r.op, r.median_ms, r.work, r.unit, r.fraction,
          r.unit == "bytes" ? byte_ceiling : flop_ceiling, r.baseline,
          r.baseline_ms > 0 ? fmt::format("{:.6f}", r.baseline_ms) : "null",
          i + 1 < records.size() ? "," : "");
    }
    file << "]\n";
    fmt::print("\nwrote {} records to {}\n", records.size(), config.json_path);
  }
  return 0;
}

}  // namespace flashindexer::cli
