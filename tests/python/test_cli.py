"""python -m flashindexer mirrors the CLI."""

import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "flashindexer", *args], check=True,
                          capture_output=True, text=True).stdout


def test_info_prints_the_build():
    assert "flashindexer 0.1.0" in _run("info")


def test_run_verifies_the_workload_against_the_reference():
    out = _run("run", "--preset", "small")
    assert "indexer_decode next_n=2" in out and out.strip().endswith("PASS")


def test_bench_prints_a_table():
    out = _run("bench", "--preset", "small", "--repeats", "1")
    assert "indexer_prefill" in out and "reproduce:" in out
