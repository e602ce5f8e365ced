#!/usr/bin/env bash
# One device call: GPU top-k tests, sanitizers on a small subset, then the benchmark.
# Usage (repo root, binaries in $BIN): BIN=.carry OUT=/tmp/out tools/bench/device_check.sh
set -u
BIN=${BIN:-build-cuda}
OUT=${OUT:-/tmp/topk-out}
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
timeout 200 "$BIN/flashindexer_tests" --gtest_filter="${TEST_FILTER:-*Cuda*:*CUDA*}" >"$OUT/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|OK \]|FAILED \]" "$OUT/tests.log" | tail -30
SMALL='TopKCuda.DecodeFormsWithNextN:TopKCuda.ShortAndEmptyRowsArePaddedWithMinusOne:TopKCuda.RefusesAMissingWorkspaceWhenRowsAreSplit'
timeout 110 compute-sanitizer --tool memcheck "$BIN/flashindexer_tests" --gtest_filter="$SMALL" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -3 "$OUT/memcheck.log"
timeout 90 compute-sanitizer --tool racecheck "$BIN/flashindexer_tests" --gtest_filter='TopKCuda.DecodeFormsWithNextN' >"$OUT/racecheck.log" 2>&1
echo "racecheck rc=$?"; tail -3 "$OUT/racecheck.log"
timeout 170 python3 tools/bench/bench_topk.py --shim "$BIN/libflashindexer_topk_shim.so" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.md"
