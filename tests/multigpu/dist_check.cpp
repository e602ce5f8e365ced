// SPDX-License-Identifier: Apache-2.0
// The NCCL transport on real GPUs: one process per GPU runs the DCP top-k all-gather and the TP
// row all-gather (flashindexer/nccl.h) and checks, on every rank, that the result equals bit for
// bit what one GPU computes over the same, un-sharded inputs; then it times the exchange and the
// DCP decode step against one GPU.
//
//   build/dist_check --ranks 2          # or 4; needs that many visible GPUs and NCCL
//   build/dist_check --ranks 2 --quick  # the checks only
//
// The processes are forked before any CUDA call (CUDA cannot be used across a fork); rank 0
// creates the NCCL unique id and hands it to the others through pipes. Exit status 0 when every
// rank matched on every case.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "flashindexer/flashindexer.h"
#include "flashindexer/nccl.h"

namespace fi = flashindexer;

namespace {

struct Args {
  int ranks = 2;
  bool quick = false;
};

// A device buffer freed at scope exit.
class Device {
 public:
  explicit Device(size_t bytes) {
    if (cudaMalloc(&data_, std::max<size_t>(bytes, 16)) != cudaSuccess) data_ = nullptr;
  }
  ~Device() { cudaFree(data_); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
};

template <typename T>
fi::TensorView upload(Device& buffer, const std::vector<T>& host, fi::DType dtype,
                      std::initializer_list<int64_t> shape) {
  cudaMemcpy(buffer.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return fi::TensorView::contiguous(buffer.get(), dtype, shape, fi::Device::kCUDA);
}

std::vector<int32_t> download(const fi::TensorView& view) {
  std::vector<int32_t> host(static_cast<size_t>(view.numel()));
  cudaMemcpy(host.data(), view.data, host.size() * sizeof(int32_t), cudaMemcpyDeviceToHost);
  return host;
}

bool ok(const fi::Status& status, int rank, const char* what) {
  if (status.ok()) return true;
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what, status.message().c_str());
  return false;
}

// Scores of one case, the same on every rank (same seed): N(0,1), or values on a 0.5 grid
// (heavy ties across ranks).
std::vector<float> make_scores(int64_t rows, int64_t width, bool ties, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> scores(static_cast<size_t>(rows * width));
  for (float& x : scores) x = ties ? std::round(normal(engine) * 2.0f) / 2.0f : normal(engine);
  return scores;
}

// topk_per_row on CUDA with its split scratch, sorted best first.
fi::Status gpu_topk(const fi::TensorView& out, const fi::TensorView& logits,
                    const fi::RowRanges& ranges, int k) {
  Device scratch(fi::topk_per_row_cuda_workspace_size(logits.shape[0], logits.shape[1], k));
  fi::RunOptions options;
  options.workspace = scratch.get();
  options.workspace_bytes =
      fi::topk_per_row_cuda_workspace_size(logits.shape[0], logits.shape[1], k);
  const fi::Status status =
      fi::topk_per_row(out, logits, ranges, k, fi::TopKOptions{true}, options);
  cudaDeviceSynchronize();
  return status;
}

// What one rank of a DCP group holds of a decode batch: its local logits and lengths.
struct Shard {
  std::vector<float> logits;  // [rows, local_width]
  std::vector<int32_t> lengths;
  int64_t local_width = 0;
};

Shard shard_of(const std::vector<float>& scores, const std::vector<int32_t>& lengths, int64_t rows,
               int64_t width, int rank, const fi::DcpGroup& group) {
  Shard shard;
  shard.local_width = std::max<int64_t>(fi::dcp_local_len(width, rank, group), 1);
  shard.logits.assign(static_cast<size_t>(rows * shard.local_width), -INFINITY);
  for (int64_t r = 0; r < rows; ++r) {
    shard.lengths.push_back(static_cast<int32_t>(fi::dcp_local_len(lengths[r], rank, group)));
    for (int64_t l = 0; l < fi::dcp_local_len(width, rank, group); ++l) {
      shard.logits[r * shard.local_width + l] = scores[r * width + fi::dcp_global(l, rank, group)];
    }
  }
  return shard;
}

// A shard on this rank's GPU: local logits [rows, local_width] f32 and lengths [rows] i32, with
// room for its local top-k and the gathered answer ([rows, k] i32 each).
struct DeviceShard {
  Device logits_buffer, lengths_buffer, topk_buffer, out_buffer;
  fi::TensorView logits, lengths, local_topk, out;
  DeviceShard(const Shard& shard, int64_t rows, int k)
      : logits_buffer(shard.logits.size() * 4),
        lengths_buffer(shard.lengths.size() * 4),
        topk_buffer(static_cast<size_t>(rows * k) * 4),
        out_buffer(static_cast<size_t>(rows * k) * 4) {
    logits = upload(logits_buffer, shard.logits, fi::DType::kF32, {rows, shard.local_width});
    lengths = upload(lengths_buffer, shard.lengths, fi::DType::kI32, {rows});
    local_topk = fi::TensorView::contiguous(topk_buffer.get(), fi::DType::kI32, {rows, k},
                                            fi::Device::kCUDA);
    out =
        fi::TensorView::contiguous(out_buffer.get(), fi::DType::kI32, {rows, k}, fi::Device::kCUDA);
    cudaMemset(out_buffer.get(), 0x7A, static_cast<size_t>(rows * k) * 4);
  }
};

// Milliseconds per call of fn: the median of five trials of `iterations` calls. Before each
// trial, `barrier` (one collective, then a device sync) lines the ranks up, so a rank that is
// still busy elsewhere (rank 0 timing one GPU) does not stretch another rank's trial.
template <typename Fn, typename Barrier>
double time_ms(Fn fn, Barrier barrier, int iterations) {
  fn();
  fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<double> trials;
  for (int trial = 0; trial < 5; ++trial) {
    barrier();
    cudaEventRecord(start);
    for (int i = 0; i < iterations; ++i) fn();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    trials.push_back(static_cast<double>(ms) / iterations);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(trials.begin(), trials.end());
  return trials[trials.size() / 2];
}

// One DCP decode case on this rank; returns whether the gathered result equals one GPU's.
bool check_dcp(int rank, const fi::NcclCommunicator& comm, int64_t rows, int64_t width, int k,
               int interleave, bool ties, uint64_t seed) {
  const fi::DcpGroup group{comm.size(), interleave};
  const std::vector<float> scores = make_scores(rows, width, ties, seed);
  std::mt19937_64 engine(seed + 1);
  std::vector<int32_t> lengths(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    lengths[r] = static_cast<int32_t>(engine() % (width + 1));
  }
  lengths[0] = static_cast<int32_t>(width);
  if (rows > 1)
    lengths[1] = std::min<int32_t>(static_cast<int32_t>(width), interleave);  // empty shards
  if (rows > 2) lengths[2] = 0;

  // One GPU over the whole rows.
  Device full_buffer(scores.size() * sizeof(float)), lengths_buffer(lengths.size() * 4);
  Device expected_buffer(static_cast<size_t>(rows * k) * 4);
  const fi::TensorView full = upload(full_buffer, scores, fi::DType::kF32, {rows, width});
  const fi::TensorView full_lengths = upload(lengths_buffer, lengths, fi::DType::kI32, {rows});
  const fi::TensorView expected_view = fi::TensorView::contiguous(
      expected_buffer.get(), fi::DType::kI32, {rows, k}, fi::Device::kCUDA);
  if (!ok(gpu_topk(expected_view, full, fi::RowRanges::decode(full_lengths), k), rank,
          "single-GPU top-k")) {
    return false;
  }

  // This rank's shard: local top-k, then the all-gather and merge.
  const DeviceShard shard(shard_of(scores, lengths, rows, width, rank, group), rows, k);
  const fi::TensorView& local = shard.logits;
  const fi::TensorView& local_topk = shard.local_topk;
  const fi::TensorView& out = shard.out;
  if (!ok(gpu_topk(local_topk, local, fi::RowRanges::decode(shard.lengths), k), rank,
          "local top-k")) {
    return false;
  }
  const size_t scratch_bytes = fi::dcp_topk_allgather_workspace_size(rows, k, comm.size());
  Device scratch(scratch_bytes);
  fi::RunOptions options;
  options.workspace = scratch.get();
  options.workspace_bytes = scratch_bytes;
  if (!ok(fi::dcp_topk_allgather(out, local, local_topk, fi::TensorView{}, k, group, comm, options),
          rank, "dcp_topk_allgather")) {
    return false;
  }
  cudaDeviceSynchronize();
  const std::vector<int32_t> got = download(out);
  const std::vector<int32_t> want = download(expected_view);
  if (got == want) return true;
  size_t first = 0;
  while (got[first] == want[first]) ++first;
  std::fprintf(stderr,
               "rank %d: DCP rows=%lld width=%lld k=%d I=%d ties=%d differs at row %zu slot %zu: "
               "%d vs %d\n",
               rank, static_cast<long long>(rows), static_cast<long long>(width), k, interleave,
               ties ? 1 : 0, first / k, first % k, got[first], want[first]);
  return false;
}

// One TP row-sharding case: each rank selects its window of prefill rows, the ranks all-gather
// the rows, and every rank must hold one GPU's answer for all of them.
bool check_tp(int rank, const fi::NcclCommunicator& comm, int64_t rows, int64_t width, int k,
              uint64_t seed) {
  const int tp = comm.size();
  const std::vector<float> scores = make_scores(rows, width, false, seed);
  std::vector<int32_t> ks(static_cast<size_t>(rows)), ke(static_cast<size_t>(rows));
  std::vector<int64_t> costs(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {  // causal suffixes of one request
    ks[r] = 0;
    ke[r] = static_cast<int32_t>(width - rows + r + 1);
    costs[r] = ke[r] - ks[r];
  }
  std::vector<int32_t> sizes(static_cast<size_t>(tp));
  if (!ok(fi::tp_row_shard_plan(fi::TensorView::contiguous(sizes.data(), fi::DType::kI32, {tp}),
                                fi::TensorView::contiguous(costs.data(), fi::DType::kI64, {rows}),
                                tp),
          rank, "tp_row_shard_plan")) {
    return false;
  }
  int64_t first = 0;
  for (int r = 0; r < rank; ++r) first += sizes[r];
  const int64_t mine = sizes[rank];

  Device logits_buffer(scores.size() * 4), ks_buffer(ks.size() * 4), ke_buffer(ke.size() * 4);
  Device expected_buffer(static_cast<size_t>(rows * k) * 4),
      shared_buffer(static_cast<size_t>(rows * k) * 4);
  const fi::TensorView logits = upload(logits_buffer, scores, fi::DType::kF32, {rows, width});
  const fi::TensorView ks_view = upload(ks_buffer, ks, fi::DType::kI32, {rows});
  const fi::TensorView ke_view = upload(ke_buffer, ke, fi::DType::kI32, {rows});
  const fi::TensorView expected = fi::TensorView::contiguous(expected_buffer.get(), fi::DType::kI32,
                                                             {rows, k}, fi::Device::kCUDA);
  const fi::TensorView shared = fi::TensorView::contiguous(shared_buffer.get(), fi::DType::kI32,
                                                           {rows, k}, fi::Device::kCUDA);
  if (!ok(gpu_topk(expected, logits, fi::RowRanges::prefill(ks_view, ke_view), k), rank,
          "single-GPU top-k")) {
    return false;
  }
  cudaMemset(shared_buffer.get(), 0x7A, static_cast<size_t>(rows * k) * 4);
  if (mine > 0) {
    auto window = [&](const fi::TensorView& view) {
      fi::TensorView part = view;
      part.data = static_cast<unsigned char*>(view.data) +
                  first * view.stride[0] * static_cast<int64_t>(fi::dtype_size(view.dtype));
      part.shape[0] = mine;
      return part;
    };
    if (!ok(gpu_topk(window(shared), window(logits),
                     fi::RowRanges::prefill(window(ks_view), window(ke_view)), k),
            rank, "window top-k")) {
      return false;
    }
  }
  if (!ok(fi::tp_allgather_rows(
              shared, fi::TensorView::contiguous(sizes.data(), fi::DType::kI32, {tp}), 0, comm),
          rank, "tp_allgather_rows")) {
    return false;
  }
  cudaDeviceSynchronize();
  if (download(shared) == download(expected)) return true;
  std::fprintf(stderr, "rank %d: TP rows=%lld width=%lld k=%d: gathered rows differ\n", rank,
               static_cast<long long>(rows), static_cast<long long>(width), k);
  return false;
}

// Exchange (pack + all-gather + merge) time, and the DCP decode step (local top-k + exchange)
// against one GPU's top-k over the whole rows; printed by rank 0.
void bench(int rank, const fi::NcclCommunicator& comm) {
  const int n = comm.size();
  if (rank == 0) {
    std::printf(
        "\n| ranks | rows | keys per row (all ranks) | k | local top-k ms | exchange ms | DCP step "
        "ms | one GPU top-k ms |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (int64_t rows : {1, 64, 256}) {
    for (int k : {512, 2048}) {
      const int64_t width = 131072 * n;
      const fi::DcpGroup group{n, 1};
      const std::vector<float> scores = make_scores(rows, width, false, 7);
      const std::vector<int32_t> lengths(static_cast<size_t>(rows), static_cast<int32_t>(width));
      const Shard host_shard = shard_of(scores, lengths, rows, width, rank, group);
      const DeviceShard shard(host_shard, rows, k);
      const fi::TensorView& local = shard.logits;
      const fi::TensorView& local_topk = shard.local_topk;
      const fi::TensorView& out = shard.out;
      const size_t topk_bytes =
          fi::topk_per_row_cuda_workspace_size(rows, host_shard.local_width, k);
      const size_t exchange_bytes = fi::dcp_topk_allgather_workspace_size(rows, k, n);
      Device topk_scratch(topk_bytes), exchange_scratch(exchange_bytes);
      fi::RunOptions topk_options, exchange_options;
      topk_options.workspace = topk_scratch.get();
      topk_options.workspace_bytes = topk_bytes;
      exchange_options.workspace = exchange_scratch.get();
      exchange_options.workspace_bytes = exchange_bytes;
      const fi::RowRanges local_ranges = fi::RowRanges::decode(shard.lengths);
      auto local_select = [&] {
        (void)fi::topk_per_row(local_topk, local, local_ranges, k, {}, topk_options);
      };
      auto exchange = [&] {
        (void)fi::dcp_topk_allgather(out, local, local_topk, fi::TensorView{}, k, group, comm,
                                     exchange_options);
      };
      auto barrier = [&] {
        exchange();
        cudaDeviceSynchronize();
      };
      local_select();
      const double local_ms = time_ms(local_select, barrier, 20);
      const double exchange_ms = time_ms(exchange, barrier, 20);
      const double step_ms = time_ms(
          [&] {
            local_select();
            exchange();
          },
          barrier, 20);
      double single_ms = 0.0;
      if (rank == 0) {  // one GPU over the whole rows, on rank 0 alone
        Device full_buffer(scores.size() * 4), full_lengths_buffer(lengths.size() * 4);
        const fi::TensorView full = upload(full_buffer, scores, fi::DType::kF32, {rows, width});
        const fi::TensorView full_lengths =
            upload(full_lengths_buffer, lengths, fi::DType::kI32, {rows});
        const size_t bytes = fi::topk_per_row_cuda_workspace_size(rows, width, k);
        Device scratch(bytes);
        fi::RunOptions options;
        options.workspace = scratch.get();
        options.workspace_bytes = bytes;
        const fi::RowRanges ranges = fi::RowRanges::decode(full_lengths);
        single_ms = time_ms([&] { (void)fi::topk_per_row(out, full, ranges, k, {}, options); },
                            [] { cudaDeviceSynchronize(); }, 20);
        std::printf("| %d | %lld | %lld | %d | %.4f | %.4f | %.4f | %.4f |\n", n,
                    static_cast<long long>(rows), static_cast<long long>(width), k, local_ms,
                    exchange_ms, step_ms, single_ms);
        std::fflush(stdout);
      }
    }
  }
}

int run_rank(int rank, const Args& args, int read_fd, const std::vector<int>& write_fds) {
  if (cudaSetDevice(rank) != cudaSuccess) {
    std::fprintf(stderr, "rank %d: no CUDA device %d\n", rank, rank);
    return 1;
  }
  fi::NcclUniqueId id;
  if (rank == 0) {
    if (!ok(fi::nccl_unique_id(&id), rank, "nccl_unique_id")) return 1;
    for (int fd : write_fds) {
      if (write(fd, id.bytes.data(), id.bytes.size()) != static_cast<ssize_t>(id.bytes.size())) {
        return 1;
      }
    }
  } else if (read(read_fd, id.bytes.data(), id.bytes.size()) !=
             static_cast<ssize_t>(id.bytes.size())) {
    std::fprintf(stderr, "rank %d: no unique id from rank 0\n", rank);
    return 1;
  }
  fi::NcclCommunicator comm;
  if (!ok(fi::NcclCommunicator::create(&comm, id, rank, args.ranks), rank, "NCCL communicator")) {
    return 1;
  }
  int failures = 0;
  uint64_t seed = 1000;
  for (int interleave : {1, 2}) {
    for (int k : {512, 2048}) {
      for (bool ties : {false, true}) {
        for (int64_t rows : {int64_t{1}, int64_t{37}}) {
          failures += check_dcp(rank, comm, rows, 100003, k, interleave, ties, ++seed) ? 0 : 1;
        }
      }
    }
  }
  for (int k : {512, 2048}) failures += check_tp(rank, comm, 301, 40000, k, ++seed) ? 0 : 1;
  std::printf("rank %d: %s (%d failed cases)\n", rank,
              failures == 0 ? "all cases match one GPU" : "MISMATCH", failures);
  std::fflush(stdout);
  if (failures == 0 && !args.quick) bench(rank, comm);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--ranks" && i + 1 < argc) {
      args.ranks = std::atoi(argv[++i]);
    } else if (arg == "--quick") {
      args.quick = true;
    } else {
      std::fprintf(stderr, "usage: %s [--ranks N] [--quick]\n", argv[0]);
      return 2;
    }
  }
  if (args.ranks < 1) {
    std::fprintf(stderr, "--ranks must be >= 1\n");
    return 2;
  }
  // Pipes from rank 0 to every other rank, made before the fork (no CUDA in this process).
  std::vector<int> read_fds(args.ranks, -1), write_fds;
  for (int r = 1; r < args.ranks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    read_fds[r] = fds[0];
    write_fds.push_back(fds[1]);
  }
  std::vector<pid_t> children;
  for (int r = 0; r < args.ranks; ++r) {
    const pid_t pid = fork();
    if (pid == 0)
      std::_Exit(run_rank(r, args, read_fds[r], r == 0 ? write_fds : std::vector<int>{}));
    children.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::printf("%s: %d of %d ranks failed\n", failed == 0 ? "PASSED" : "FAILED", failed, args.ranks);
  return failed == 0 ? 0 : 1;
}
