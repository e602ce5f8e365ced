# SPDX-License-Identifier: Apache-2.0
"""The binding itself: zero copies, argument conversion, errors, import-time behaviour."""

import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import flashindexer as fi
from flashindexer import _C


def test_import_loads_neither_torch_nor_cuda():
    code = ("import sys, flashindexer; "
            "assert 'torch' not in sys.modules and 'cupy' not in sys.modules; "
            "maps = open('/proc/self/maps').read(); "
            "assert 'libcuda.so' not in maps, 'CUDA driver loaded at import'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_outputs_are_written_in_place():
    x = np.ones((4, 128), np.float32)
    out = np.zeros((4, 128), np.float32)
    values, scales = fi.quantize_k_fp8(x)
    assert fi.dequantize_k_fp8(values, scales, out=out) is out
    np.testing.assert_array_equal(out, x)


def test_read_only_inputs_are_accepted_and_read_only_outputs_rejected():
    x = np.ones((4, 128), np.float32)
    x.flags.writeable = False
    values, scales = fi.quantize_k_fp8(x)
    out = np.zeros((4, 128), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="dequantize_k_fp8: out is read-only"):
        fi.dequantize_k_fp8(values, scales, out=out)


def test_raw_module_takes_tagged_arrays_and_rejects_bad_tags():
    values = np.full((2, 64), 0x38, np.uint8)  # e4m3 1.0
    scales = np.full(2, 2.0, np.float32)
    out = np.zeros((2, 64), np.float32)
    _C.dequantize_k_fp8(out, (values, "e4m3"), scales)
    assert (out == 2.0).all()
    with pytest.raises(ValueError, match='names format "e5m2"'):
        _C.dequantize_k_fp8(out, (values, "e5m2"), scales)
    with pytest.raises(TypeError, match="cannot hold format bf16"):
        _C.dequantize_k_fp8(out, (values, "bf16"), scales)
    with pytest.raises(TypeError, match="values has dtype e2m1x2, expected e4m3"):
        _C.dequantize_k_fp8(out, (values, "e2m1x2"), scales)


def test_rank_and_zero_dimensional_arguments_are_rejected():
    with pytest.raises(ValueError, match="has rank 5"):
        fi.dequantize_k_fp8(np.zeros((1, 1, 1, 1, 4), np.uint8), np.zeros(1, np.float32))
    # Far past the views' dimensions: refused before anything is copied into them.
    lengths = np.full(2, 8, np.int32)
    with pytest.raises(ValueError, match="logits has rank 42"):
        _C.topk_per_row(np.zeros((2, 2), np.int32), np.zeros((1,) * 40 + (2, 8), np.float32), 2,
                        lengths=lengths)
    with pytest.raises(ValueError, match="workspace has rank 40"):
        _C.topk_per_row(np.zeros((2, 2), np.int32), np.zeros((2, 8), np.float32), 2,
                        lengths=lengths, workspace=np.zeros((1,) * 40, np.uint8))
    with pytest.raises(ValueError, match="scales has rank 0"):
        _C.dequantize_k_fp8(np.zeros((1, 4), np.float32), np.zeros((1, 4), np.uint8),
                            np.float32(1.0))


def test_non_contiguous_inner_dimension_is_a_value_error():
    logits = np.zeros((4, 200), np.float32)[:, ::2]
    with pytest.raises(ValueError, match="logits"):
        fi.topk_per_row(logits, 4, lengths=np.full(4, 100, np.int32))


def test_workspace_on_the_wrong_device_kind_or_misaligned_is_rejected():
    logits = np.zeros((4, 100), np.float32)
    lengths = np.full(4, 100, np.int32)
    workspace = np.zeros(fi.topk_per_row_cpu_workspace_size(4) + 64, np.uint8)
    with pytest.raises(ValueError, match="16-byte aligned"):
        fi.topk_per_row(logits, 4, lengths=lengths, workspace=workspace[1:])
    with pytest.raises(ValueError, match="workspace must be contiguous"):
        fi.topk_per_row(logits, 4, lengths=lengths, workspace=workspace.reshape(-1, 2)[:, :1])


def test_the_gil_is_released_while_an_op_runs(rng):
    # A Python thread stamps the time about every millisecond while ops run. With the GIL held
    # during an op, the thread could run only at the bytecode boundaries around each call, so no
    # stamp could fall in the middle half of a call; released, most of them do. Counting stamps
    # there (not all stamps against a guessed op time) keeps the test exact on a slow or busy
    # machine: the calls go on until they have taken 60 ms, however fast each one is.
    logits = rng.standard_normal((64, 200_000)).astype(np.float32)
    lengths = np.full(64, 200_000, np.int32)
    stamps = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            stamps.append(time.perf_counter())
            done.wait(0.001)

    thread = threading.Thread(target=ticker)
    thread.start()
    calls = []
    busy = 0.0
    while busy < 0.06 and len(calls) < 1000:
        start = time.perf_counter()
        fi.topk_per_row(logits, 2048, lengths=lengths, cpu_threads=1)
        end = time.perf_counter()
        calls.append((start + 0.25 * (end - start), end - 0.25 * (end - start)))
        busy += end - start
    done.set()
    thread.join()
    inside = sum(1 for t in stamps for lo, hi in calls if lo < t < hi)
    assert inside >= 3, (f"{inside} of {len(stamps)} stamps in the middle half of {len(calls)} "
                         f"calls ({busy * 1e3:.0f} ms)")


def test_build_info_and_sizes():
    info = fi.build_info()
    assert info["version"] == fi.__version__ and isinstance(info["cuda"], bool)
    assert info["nccl"] == fi.has_nccl()
    assert fi.page_bytes("fp8", 64, 128) == 64 * 132
    assert fi.page_bytes("mxfp4", 64, 128) == 64 * 68
    assert fi.topk_per_row_cpu_workspace_size(2048) > 0
    assert fi.MAX_TOPK == 4096


def test_empty_arrays_go_through_every_layout_check():
    # NumPy hands an empty array's strides through DLPack as zeros; they must not be taken for a
    # non-contiguous layout.
    keys = fi.quantize_k_fp8(np.ones((5, 128), np.float32))
    empty_q = fi.quantize_k_fp8(np.zeros((0, 128), np.float32))
    assert empty_q.values.shape == (0, 128)
    none = np.zeros(0, np.int32)
    logits = fi.mqa_logits(empty_q.values.reshape(0, 32, 128), keys,
                           np.zeros((0, 32), np.float32), none, none)
    assert logits.shape == (0, 5)
    assert fi.topk_per_row(np.zeros((0, 10), np.float32), 5, lengths=none).shape == (0, 5)
