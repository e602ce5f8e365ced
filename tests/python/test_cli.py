# SPDX-License-Identifier: Apache-2.0
"""python -m flashindexer mirrors the CLI: `run` takes the arguments of `flashindexer run`."""

import pathlib
import re
import subprocess
import sys

import pytest

import flashindexer as fi

SOURCE = pathlib.Path(__file__).resolve().parents[2]


def _call(*args):
    return subprocess.run([sys.executable, "-m", "flashindexer", *args], capture_output=True,
                          text=True)


def _run(*args):
    return subprocess.run([sys.executable, "-m", "flashindexer", *args], check=True,
                          capture_output=True, text=True).stdout


def _cpp_run_options():
    """{flag: choices or None} of `flashindexer run`, read from its definition."""
    main = (SOURCE / "tools/cli/main.cpp").read_text()
    body = main[main.index('add_subcommand(\n      "run"'):main.index("info_app")]
    options = {}
    for match in re.finditer(r'add_option\("(--[a-z-]+)"(.*?);', body, re.S):
        choices = re.search(r"IsMember\(\{([^}]*)\}\)", match.group(2))
        options[match.group(1)] = (
            sorted(re.findall(r'"([^"]+)"', choices.group(1))) if choices else None)
    workload = (SOURCE / "tools/cli/workload.cpp").read_text()
    presets = workload[workload.index("presets() {"):]
    presets = presets[:presets.index("};")]
    options["--preset"] = sorted(re.findall(r'\{"([a-z0-9]+)", "', presets))
    return options


def _python_run_options():
    """{flag: choices or None} of `python -m flashindexer run`, read from its --help."""
    help_text = _run("run", "--help")
    options = {}
    for match in re.finditer(r"(--[a-z-]+)(?: \{([^}]*)\}| [A-Z_]+)?", help_text):
        if match.group(1) == "--help":
            continue
        choices = match.group(2)
        options.setdefault(match.group(1), sorted(choices.split(",")) if choices else None)
    return options


def test_info_prints_the_build():
    assert "flashindexer 0.1.0" in _run("info")


@pytest.mark.skipif(not (SOURCE / "tools/cli/main.cpp").exists(), reason="needs the source tree")
def test_run_takes_the_arguments_of_the_cpp_run():
    cpp = _cpp_run_options()
    assert set(cpp) == {"--device", "--preset", "--format", "--seed", "--verify-rows"}, cpp
    assert _python_run_options() == cpp


def test_run_accepts_every_flag_of_the_cpp_run():
    out = _run("run", "--device", "cpu", "--preset", "small", "--seed", "3", "--verify-rows", "4")
    assert "device cpu, seed 3" in out and out.strip().endswith("PASS")


def test_run_on_the_cpu_verifies_the_small_preset():
    out = _run("run", "--device", "cpu", "--preset", "small")
    assert "indexer_decode next_n=2" in out and "verified against the reference" in out
    assert out.strip().endswith("PASS")


@pytest.mark.parametrize("preset", ["small", "v41small"])
def test_run_on_the_cpu_verifies_the_mxfp4_format(preset):
    out = _run("run", "--device", "cpu", "--preset", preset, "--format", "mxfp4")
    assert "format mxfp4" in out and "indexer_decode next_n=2" in out
    assert out.strip().endswith("PASS")


def test_run_verifies_the_workload_against_the_reference():
    out = _run("run", "--preset", "small")
    assert "indexer_decode next_n=2" in out and out.strip().endswith("PASS")


def test_run_rejects_a_device_it_does_not_know():
    result = _call("run", "--device", "tpu")
    assert result.returncode == 2 and "invalid choice: 'tpu'" in result.stderr


def _gpu_runs():
    if fi.cuda_device_count() == 0 or not fi.cuda_device_runs_kernels(0):
        return False
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def test_run_on_cuda_verifies_or_says_why_it_cannot():
    result = _call("run", "--device", "cuda", "--preset", "small")
    if _gpu_runs():
        assert result.returncode == 0, result.stdout + result.stderr
        assert "device cuda" in result.stdout and result.stdout.strip().endswith("PASS")
    else:
        assert result.returncode == 2, result.stdout + result.stderr
        assert re.search(r"error: (this build has no CUDA backend|no CUDA device is visible|"
                         r"--device cuda needs PyTorch with CUDA|.*compute capability)",
                         result.stderr), result.stderr


def test_bench_prints_a_table():
    out = _run("bench", "--preset", "small", "--repeats", "1")
    assert "indexer_prefill" in out and "reproduce:" in out
