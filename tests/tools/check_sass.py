#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SASS guards over the built CUDA kernels (no GPU needed): cuobjdump -sass on the object files.

  * Top-k kernels (src/cuda/topk/, and the fused select, src/cuda/sm90_fused/select_kernel.cu):
    no YIELD. ptxas once put one into every loop of the segment kernel (after an unrelated change
    added a second inlined row_range), and its streaming loop ran at half speed with otherwise
    the same instructions (docs/history/).
  * Top-k kernels, the fused indexer's gate (src/cuda/sm90_fused/) and every other kernel of
    the backend (cache writes, quantizers, candidates, planning, DCP, dequantize): no local
    stores (none spills), so a new spill does not land unseen.
  * Scoring kernels (src/cuda/sm90_scoring/, and the fused indexer's emitting instantiations in
    src/cuda/sm90_fused/): every score_kernel instantiation uses QGMMA (FP8 wgmma), and none
    stores to local memory (none spills since the emitting paged N = 256 stopped).
  * MXFP4 scoring (src/cuda/sm90_scoring/, format_mxfp4.cuh): all nine storing instantiations
    (prefill H32/H64, decode H64 N = 64..256, H32 N = 32..128), the ten sparse ones and the seven
    emitting decode ones of the fused indexer (sm90_fused/) are there, held to the rules above,
    and the exact fix-up kernel (mxfp4_fixup.cu) stores nothing to local memory.
  * Scoring kernels: no barrier arrival (SYNCS.ARRIVE...A1T0, a consumer releasing a stage or a
    Q buffer that TMA refills) follows a shared-memory load without a proxy fence
    (FENCE.VIEW.ASYNC.S) between them. ptxas does not hold the arrival for the load, and without
    the fence TMA refilled stages under loads still in flight (wrong H32 prefill scores on the
    H200; docs/history/). Straight-line order, regions reset at EXIT and USETMAXREG.
  * Scoring kernels with A from registers (format_mxfp4_registers.cuh): no instruction writes a
    register that an issued QGMMA reads as A before the next WARPGROUP.DEPBAR (its wait). ptxas
    does not keep those registers for the wgmma: a build that converted the next step's keys
    while the current step's wgmma ran had it reuse them, and gave schedule-dependent logits on
    the H200 (docs/history/mxfp4-scoring.md). Straight-line order.

usage: check_sass.py BUILD_DIR [CUOBJDUMP]
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def find_cuobjdump(explicit):
    candidates = [explicit, os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    candidates.append(os.path.join(os.path.dirname(nvcc), "cuobjdump"))
    # The PyPI packages nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm (make test installs them
    # into the project's venv).
    here = os.path.dirname(os.path.abspath(__file__))
    candidates += glob.glob(os.path.join(here, "..", "..", ".venv", "lib", "python*",
                                         "site-packages", "nvidia", "cu*", "bin", "cuobjdump"))
    for candidate in candidates:
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def kernels(cuobjdump, path):
    """{function name: list of SASS instruction lines} of one object file."""
    # cuobjdump -sass runs nvdisasm, from PATH: the wheels put both in one folder.
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")
    result = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"{cuobjdump} -sass {path} failed: {result.stderr.strip()}")
    sass = result.stdout
    functions = {}
    current = None
    for line in sass.splitlines():
        match = re.search(r"Function : (\S+)", line)
        if match:
            current = functions.setdefault(match.group(1), [])
        elif current is not None and re.match(r"\s*/\*[0-9a-f]{4,}\*/", line):
            current.append(line)
    return functions


def count(lines, opcode):
    return sum(1 for line in lines if re.search(r"\b" + opcode + r"\b", line))


def local_store_failures(name, lines):
    """A failure for a kernel that stores to local memory (a spill), for the top-k, indexer and
    scoring kernels alike."""
    stores = count(lines, "STL(?:\\.\\w+)*")
    return [f"{name}: {stores} local stores (expected none)"] if stores else []


def arrivals_after_unfenced_loads(lines):
    """Arrivals (SYNCS.ARRIVE.TRANS64.A1T0) with a shared-memory load (LDS) before them and no
    FENCE.VIEW.ASYNC.S in between, in straight-line order."""
    bad = 0
    loaded = False
    for line in lines:
        if re.search(r"\b(EXIT|USETMAXREG)\b", line) or "FENCE.VIEW.ASYNC.S" in line:
            loaded = False
        elif re.search(r"\bLDS(?:\.\w+)*\b", line):
            loaded = True
        elif "SYNCS.ARRIVE.TRANS64.A1T0" in line and loaded:
            bad += 1
    return bad


def register_a_overwrites(lines):
    """Writes to a register that an in-flight QGMMA (A from registers: `QGMMA... Rd, Ra, gdesc`)
    reads as A (Ra .. Ra + 3), before the WARPGROUP.DEPBAR that waits for it."""
    bad = 0
    in_flight = set()
    for line in lines:
        text = re.sub(r"/\*[^*]*\*/", "", line).strip()
        qgmma = re.match(r"(?:@!?U?P\w+\s+)?QGMMA\S*\s+R\d+,\s+R(\d+),", text)
        if qgmma:
            in_flight |= set(range(int(qgmma.group(1)), int(qgmma.group(1)) + 4))
            continue
        if "WARPGROUP.DEPBAR" in text or re.search(r"\bEXIT\b", text):
            in_flight = set()
            continue
        write = re.match(r"(?:@!?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s+R(\d+)\b", text)
        if not in_flight or not write:
            continue
        opcode = write.group(1)
        if opcode.startswith(("ST", "RED", "ATOM", "BRA", "BAR", "SYNCS", "WARPSYNC")) or \
                "SETP" in opcode:
            continue  # no register destination (or a predicate one)
        first = int(write.group(2))
        width = 4 if ".128" in opcode else 2 if ".64" in opcode else 1
        if in_flight & set(range(first, first + width)):
            bad += 1
    return bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    objects = os.path.join(sys.argv[1], "CMakeFiles", "flashindexer.dir", "src", "cuda")
    def objects_under(folder):
        return sorted(glob.glob(os.path.join(objects, folder, "**", "*.cu.o"), recursive=True))

    # The fused indexer's select is built from the top-k's blocks and held to the same rules.
    select = os.path.join(objects, "sm90_fused", "select_kernel.cu.o")
    topk = objects_under("topk") + [select]
    scoring = objects_under("sm90_scoring")
    fused = [path for path in objects_under("sm90_fused") if path != select]
    if not objects_under("topk") or not scoring or not fused:
        sys.exit(f"no CUDA object files under {objects} (was the CUDA backend built?)")
    cuobjdump = find_cuobjdump(sys.argv[2] if len(sys.argv) > 2 else None)
    if cuobjdump is None:
        sys.exit("cuobjdump not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm, or "
                 "set CUOBJDUMP")
    failures = []
    checked = 0
    for path in topk:
        for name, lines in kernels(cuobjdump, path).items():
            checked += 1
            yields = count(lines, "YIELD")
            if yields:
                failures.append(f"{name}: {yields} YIELD instructions (expected none)")
            failures += local_store_failures(name, lines)
    indexer_kernels = 0
    score_kernels = 0
    mxfp4_score_kernels = 0
    mxfp4_fixup_kernels = 0
    for path in scoring + fused:
        for name, lines in kernels(cuobjdump, path).items():
            if "score_kernel" not in name:
                if path in fused:  # the fused indexer's gate
                    indexer_kernels += 1
                    failures += local_store_failures(name, lines)
                elif "mxfp4_fixup_kernel" in name:
                    mxfp4_fixup_kernels += 1
                    failures += local_store_failures(name, lines)
                continue
            score_kernels += 1
            if "KeysMXFP4" in name:
                mxfp4_score_kernels += 1
            if count(lines, "QGMMA(?:\\.\\w+)*") == 0:
                failures.append(f"{name}: no QGMMA")
            failures += local_store_failures(name, lines)
            overwrites = register_a_overwrites(lines)
            if overwrites:
                failures.append(f"{name}: {overwrites} writes to the A registers of a QGMMA in "
                                "flight")
            unfenced = arrivals_after_unfenced_loads(lines)
            if unfenced:
                failures.append(f"{name}: {unfenced} barrier arrivals after shared loads without "
                                "a proxy fence")
    # Every other kernel folder: no local stores either.
    known = {"topk", "sm90_scoring", "sm90_fused"}
    other_kernels = 0
    for folder in sorted(os.listdir(objects)):
        if folder in known or not os.path.isdir(os.path.join(objects, folder)):
            continue
        for path in objects_under(folder):
            for name, lines in kernels(cuobjdump, path).items():
                other_kernels += 1
                failures += local_store_failures(name, lines)
    if other_kernels == 0:
        failures.append("no kernel outside top-k and scoring found")
    if indexer_kernels == 0:
        failures.append("no indexer kernel (the fused gate) found")
    if score_kernels == 0:
        failures.append("no score_kernel instantiation found")
    if mxfp4_score_kernels != 26:
        failures.append(f"{mxfp4_score_kernels} MXFP4 score_kernel instantiations (expected 26)")
    if mxfp4_fixup_kernels != 2:
        failures.append(f"{mxfp4_fixup_kernels} MXFP4 fix-up kernels (expected 2)")
    for failure in failures:
        print("FAIL", failure)
    print(f"checked {other_kernels} other kernels, {checked} top-k kernels, {indexer_kernels} indexer kernels and {score_kernels} "
          f"scoring kernels ({mxfp4_score_kernels} MXFP4) with {cuobjdump}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
