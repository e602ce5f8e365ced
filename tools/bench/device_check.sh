#!/usr/bin/env bash
# One device call: GPU tests, sanitizers on small subsets, the benchmarks, and optionally an
# ncu look at one top-k segment-kernel launch. Usage (repo root, binaries in $BIN):
#   BIN=build OUT=/tmp/out STEPS="tests memcheck racecheck bench scoring-tests scoring-sanitize \
#     scoring-bench ncu" tools/bench/device_check.sh
set -u
BIN=${BIN:-build-cuda}
OUT=${OUT:-/tmp/topk-out}
STEPS=${STEPS:-tests memcheck racecheck bench}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
SMALL='TopKCuda.DecodeFormsWithNextN:TopKCuda.ShortAndEmptyRowsArePaddedWithMinusOne:TopKCuda.RefusesAMissingWorkspaceWhenRowsAreSplit:TopKCuda.HonoursInputAndOutputRowStrides'
for step in $STEPS; do
  case $step in
    tests)
      timeout 200 "$BIN/flashindexer_tests" --gtest_filter="${TEST_FILTER:-*Cuda*:*CUDA*}" >"$OUT/tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \] TopK|FAILED \]" "$OUT/tests.log" | tail -30 ;;
    memcheck)
      timeout 150 compute-sanitizer --tool memcheck "$BIN/flashindexer_tests" --gtest_filter="$SMALL" >"$OUT/memcheck.log" 2>&1
      echo "memcheck rc=$?"; tail -2 "$OUT/memcheck.log" ;;
    racecheck)
      timeout 120 compute-sanitizer --tool racecheck "$BIN/flashindexer_tests" --gtest_filter='TopKCuda.DecodeFormsWithNextN:TopKCuda.AllEqualRowsTakeTheSmallestIndices' >"$OUT/racecheck.log" 2>&1
      echo "racecheck rc=$?"; tail -2 "$OUT/racecheck.log" ;;
    bench)
      timeout 200 python3 tools/bench/bench_topk.py --shim "$BIN/libflashindexer_bench_shim.so" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.md" ;;
    scoring-tests)
      timeout 400 "$BIN/flashindexer_tests" --gtest_filter='*LogitsCuda*' >"$OUT/scoring-tests.log" 2>&1
      echo "scoring tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]|Failure|error" "$OUT/scoring-tests.log" | tail -30 ;;
    scoring-sanitize)
      SCORING_SMALL='MqaLogitsCuda.GraphReplayGivesTheSameBits:PagedMqaLogitsCuda.LongSingleRequestMatchesTheCpuBackend'
      for tool in memcheck racecheck synccheck; do
        timeout 200 compute-sanitizer --tool $tool "$BIN/flashindexer_tests" --gtest_filter="$SCORING_SMALL" >"$OUT/scoring-$tool.log" 2>&1
        echo "scoring $tool rc=$?"; tail -2 "$OUT/scoring-$tool.log"
      done ;;
    scoring-bench)
      timeout 400 python3 tools/bench/bench_logits.py --shim "$BIN/libflashindexer_bench_shim.so" ${SCORING_ARGS:-} 2>&1 | tee "$OUT/scoring-bench.md" ;;
    ncu)
      timeout 150 ncu --clock-control none -k regex:topk_segment --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section SchedulerStats python3 tools/bench/bench_topk.py --shim "$BIN/libflashindexer_bench_shim.so" \
        --only "4096x32768 fp32 k=2048" --iters 1 >"$OUT/ncu.txt" 2>&1
      echo "ncu rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers|Stall|Issue Slot|No Eligible|One or More" "$OUT/ncu.txt" | head -30 ;;
  esac
done
