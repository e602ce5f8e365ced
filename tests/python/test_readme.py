# SPDX-License-Identifier: Apache-2.0
"""The README's Python example runs as written: with PyTorch where it is installed, and always
with NumPy arrays standing in for torch tensors (the ops take both through DLPack)."""

import pathlib
import re
import sys
import types

import numpy as np
import pytest

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def _example():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 1, "README.md should hold one Python example"
    return blocks[0]


def _numpy_torch():
    """The few torch functions the example calls, on NumPy arrays."""
    rng = np.random.default_rng(0)
    stand_in = types.ModuleType("torch")
    stand_in.int32 = np.int32
    stand_in.randn = lambda *shape: rng.standard_normal(shape, np.float32)
    stand_in.zeros = lambda n, dtype=np.float32: np.zeros(n, dtype)
    stand_in.tensor = lambda values, dtype=None: np.asarray(values, dtype)
    stand_in.equal = np.array_equal
    return stand_in


def test_readme_example_runs_with_pytorch():
    pytest.importorskip("torch")
    exec(compile(_example(), str(README), "exec"), {})


def test_readme_example_runs_with_numpy_arrays(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _numpy_torch())
    exec(compile(_example(), str(README), "exec"), {})
