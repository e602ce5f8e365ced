// SPDX-License-Identifier: Apache-2.0
#include "cli/info.h"

#include <fmt/core.h>
#include <omp.h>

#include <array>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>

#include "flashindexer/nccl.h"
#include "flashindexer/version.h"

#ifdef FLASHINDEXER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flashindexer::cli {
namespace {

// The x86 features the CPU backend's kernels can use, as /proc/cpuinfo names them.
constexpr std::array<std::string_view, 8> kReportedFlags = {
    "avx2",        "avx512f",  "avx512bw", "avx512_bf16",
    "avx512_vnni", "amx_tile", "amx_int8", "amx_bf16"};

struct CpuInfo {
  std::string model = "unknown";
  std::set<std::string> flags;
};

// The first processor's model name and flags; empty on systems without /proc/cpuinfo.
CpuInfo read_cpuinfo() {
  CpuInfo info;
  std::ifstream cpuinfo("/proc/cpuinfo");
  bool have_model = false;
  bool have_flags = false;
  for (std::string line; std::getline(cpuinfo, line) && !(have_model && have_flags);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : std::string();
    if (key == "model name" && !have_model) {
      info.model = value;
      have_model = true;
    } else if (key == "flags" && !have_flags) {
      std::istringstream words(value);
      for (std::string flag; words >> flag;) info.flags.insert(flag);
      have_flags = true;
    }
  }
  return info;
}

void print_gpus() {
  const int count = cuda_device_count();
  fmt::print("gpus: {} visible\n", count);
#ifdef FLASHINDEXER_WITH_CUDA
  for (int device = 0; device < count; ++device) {
    cudaDeviceProp properties;
    const cudaError_t error = cudaGetDeviceProperties(&properties, device);
    if (error != cudaSuccess) {
      fmt::print("  cuda:{}: cudaGetDeviceProperties failed: {}\n", device,
                 cudaGetErrorString(error));
      continue;
    }
    std::string refusal;
    const bool runs = cuda_device_runs_kernels(device, &refusal);
    fmt::print("  cuda:{}: {}, sm_{}{}, {} SMs, {:.1f} GiB, {}\n", device, properties.name,
               properties.major, properties.minor, properties.multiProcessorCount,
               static_cast<double>(properties.totalGlobalMem) / (1u << 30),
               runs ? "runs the kernels" : "does not run the kernels: " + refusal);
  }
#endif
}

}  // namespace

int info_command() {
  const BuildInfo build = build_info();
  fmt::print("flashindexer {}\n", kVersion);
  fmt::print("build: CUDA backend {}{}, compiler {}\n", build.cuda ? "on" : "off",
             build.cuda ? fmt::format(" ({})", build.cuda_archs) : std::string(), build.compiler);
  const int nccl = nccl_version();  // NCCL is loaded at run time: report what loads here
  fmt::print("nccl: {}\n",
             has_nccl() ? fmt::format("{}.{}.{} loaded", nccl / 10000, nccl / 100 % 100, nccl % 100)
                        : std::string("not available (multi-GPU transport off)"));

  const CpuInfo cpu = read_cpuinfo();
  fmt::print("cpu: {}, {} logical cores, {} OpenMP threads\n", cpu.model,
             std::thread::hardware_concurrency(), omp_get_max_threads());
  std::string features;
  for (std::string_view flag : kReportedFlags) {
    features += fmt::format(" {}={}", flag, cpu.flags.contains(std::string(flag)) ? "yes" : "no");
  }
  fmt::print("cpu features:{}\n", features);
  print_gpus();
  return 0;
}

}  // namespace flashindexer::cli
