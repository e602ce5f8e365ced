#!/usr/bin/env bash
# The GPU checks in one command: GPU tests, sanitizers on small subsets, the Python suite with
# its GPU cases, the benchmarks, and optionally an ncu look at one top-k segment-kernel launch.
# Usage (repo root, binaries in $BIN; `make gpu-check` runs the default steps):
#   BIN=build OUT=/tmp/out STEPS="tests memcheck racecheck bench scoring-tests scoring-sanitize \
#     indexer-tests indexer-sanitize scoring-bench python indexer-bench multi-gpu ncu" \
#     tools/bench/device_check.sh
# The python step builds the module (cmake target _C, extra configure flags in $CMAKE_ARGS) into
# $BIN-py and runs pytest on it with the system python3 (PyTorch with CUDA, CuPy, JAX if there).
set -u
BIN=${BIN:-build-cuda}
OUT=${OUT:-/tmp/topk-out}
STEPS=${STEPS:-tests memcheck racecheck scoring-tests scoring-sanitize indexer-sanitize python bench scoring-bench indexer-bench}
STAGE="$BIN-py/stage"
# A module built here and loaded into python3 has been seen to need the system libstdc++ first.
PRELOAD=$(ls /usr/lib/x86_64-linux-gnu/libstdc++.so.6 2>/dev/null || true)
mkdir -p "$OUT"
nvidia-smi -L | tee "$OUT/gpu.txt"
SMALL='TopKCuda.DecodeFormsWithNextN:TopKCuda.ShortAndEmptyRowsArePaddedWithMinusOne:TopKCuda.RefusesAMissingWorkspaceWhenRowsAreSplit:TopKCuda.HonoursInputAndOutputRowStrides'
for step in $STEPS; do
  case $step in
    tests)
      # The whole GPU set took 256 s on an H200 machine (2026-12-01).
      timeout 600 "$BIN/flashindexer_tests" --gtest_filter="${TEST_FILTER:-*Cuda*:*CUDA*}" >"$OUT/tests.log" 2>&1
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
    indexer-tests)
      # Both CUDA indexer paths (dense and fused) and the scoring kernel they share.
      timeout 500 "$BIN/flashindexer_tests" --gtest_filter='*IndexerPrefillCuda*:*IndexerDecodeCuda*:FusedIndexerCuda.*:*MqaLogitsCuda*' >"$OUT/indexer-tests.log" 2>&1
      echo "indexer tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |OK \]|FAILED \]" "$OUT/indexer-tests.log" | tail -30 ;;
    indexer-sanitize)
      # The CUDA indexer (dense and fused paths) and the DCP pack / merge kernels.
      NEW_SMALL='IndexerDecodeCuda.GraphReplayGivesTheSameIndices:FusedIndexerCuda.CandidateOverflowFallsBackExactly:DcpCuda.TiesAcrossRanksGoToTheSmallerGlobalId:DcpCuda.NanRanksBelowMinusInfinityAndAboveEmptySlots'
      for tool in memcheck racecheck; do
        timeout 250 compute-sanitizer --tool $tool "$BIN/flashindexer_tests" --gtest_filter="$NEW_SMALL" >"$OUT/indexer-$tool.log" 2>&1
        echo "indexer/dcp $tool rc=$?"; tail -2 "$OUT/indexer-$tool.log"
      done ;;
    scoring-bench)
      timeout 400 python3 tools/bench/bench_logits.py --shim "$BIN/libflashindexer_bench_shim.so" ${SCORING_ARGS:-} 2>&1 | tee "$OUT/scoring-bench.md" ;;
    python)
      { cmake -S . -B "$BIN-py" -G Ninja -DFLASHINDEXER_PYTHON=ON -DFLASHINDEXER_TESTS=OFF \
          -DFLASHINDEXER_CLI=OFF ${CMAKE_ARGS:-} && cmake --build "$BIN-py" --target _C -j; } \
        >"$OUT/python-build.log" 2>&1
      echo "python module build rc=$?"
      rm -rf "$STAGE" && mkdir -p "$STAGE" && cp -r python/flashindexer "$STAGE/" &&
        cp "$BIN-py"/_C*.so "$STAGE/flashindexer/"
      PYTHONPATH="$STAGE" LD_PRELOAD="$PRELOAD" timeout 400 python3 -m pytest tests/python -q -rs \
        >"$OUT/python-tests.log" 2>&1
      echo "python tests rc=$?"; tail -15 "$OUT/python-tests.log" ;;
    indexer-bench)
      PYTHONPATH="$STAGE:tools/bench" LD_PRELOAD="$PRELOAD" timeout 400 \
        python3 tools/bench/bench_indexer.py ${INDEXER_ARGS:-} 2>&1 | tee "$OUT/indexer-bench.md" ;;
    multi-gpu)
      # Needs RANKS (default 2) GPUs and NCCL: DCP and TP all-gathers against one GPU, timings.
      timeout 500 "$BIN/dist_check" --ranks "${RANKS:-2}" 2>&1 | tee "$OUT/multi-gpu.md"
      echo "multi-gpu rc=${PIPESTATUS[0]}" ;;
    ncu)
      timeout 150 ncu --clock-control none -k regex:topk_segment --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section SchedulerStats python3 tools/bench/bench_topk.py --shim "$BIN/libflashindexer_bench_shim.so" \
        --only "4096x32768 fp32 k=2048" --iters 1 >"$OUT/ncu.txt" 2>&1
      echo "ncu rc=$?"; grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers|Stall|Issue Slot|No Eligible|One or More" "$OUT/ncu.txt" | head -30 ;;
  esac
done
