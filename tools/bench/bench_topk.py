#!/usr/bin/env python3
"""GPU topk_per_row vs torch.topk(sorted=False) on H200-class GPUs.

Calls the C++ op through tools/bench/bench_shim.cpp (ctypes) on torch CUDA tensors and torch's
current stream. For every case: checks our answer against torch on a few rows (the selected
values must be the same multiset; for distinct fp32 values the index sets must be equal too),
then times both with CUDA events, L2 flushed before every timed call (a 256 MiB write), and
prints one markdown table. Effective TB/s = visible logits bytes / our time. Each call is timed
twice: launched from Python (host launch overhead included: it dominates below ~60 us) and as
the replay of a CUDA graph that captured it (the GPU time, as served under graph capture).

  python3 tools/bench/bench_topk.py --shim build-cuda/libflashindexer_bench_shim.so
"""
import argparse
import ctypes

import torch

from bench_logits import add_only_argument, selected
from cuda_timing import capture_graph, event_median_ms

CASES = [
    # name, rows, width, k, dtype, form, offset
    ("prefill 4096x131072 fp32 k=2048", 4096, 131072, 2048, torch.float32, "prefill", 0.0),
    ("prefill 4096x131072 fp32 k=2048, N(0,1)+100", 4096, 131072, 2048, torch.float32, "prefill", 100.0),
    ("prefill 4096x131072 fp32 k=512", 4096, 131072, 512, torch.float32, "prefill", 0.0),
    ("prefill 4096x32768 fp32 k=512", 4096, 32768, 512, torch.float32, "prefill", 0.0),
    ("prefill 4096x32768 fp32 k=2048", 4096, 32768, 2048, torch.float32, "prefill", 0.0),
    ("prefill 16384x65536 fp32 k=2048", 16384, 65536, 2048, torch.float32, "prefill", 0.0),
    ("prefill 4096x131072 bf16 k=2048", 4096, 131072, 2048, torch.bfloat16, "prefill", 0.0),
    ("decode 64x131072 fp32 k=2048", 64, 131072, 2048, torch.float32, "decode", 0.0),
    ("decode 1x131072 fp32 k=2048", 1, 131072, 2048, torch.float32, "decode", 0.0),
    ("decode 64x131072 fp32 k=512", 64, 131072, 512, torch.float32, "decode", 0.0),
    ("decode 128x131072 fp32 k=2048", 128, 131072, 2048, torch.float32, "decode", 0.0),
    # diagnostics: one wave of one-CTA rows (264 = 2 CTAs per SM), and the split path at 132 rows
    ("diag 264x131072 fp32 k=2048 (one wave, 1 CTA/row)", 264, 131072, 2048, torch.float32, "decode", 0.0),
    ("diag 132x131072 fp32 k=2048 (2 splits)", 132, 131072, 2048, torch.float32, "decode", 0.0),
    ("diag 4096x8192 fp32 k=2048 (direct path only)", 4096, 8192, 2048, torch.float32, "prefill", 0.0),
]


def load_shim(path):
    lib = ctypes.CDLL(path)
    lib.fi_topk_per_row.restype = ctypes.c_int
    lib.fi_topk_per_row.argtypes = [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64,
        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
        ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
        ctypes.c_void_p]
    lib.fi_topk_workspace_size.restype = ctypes.c_size_t
    lib.fi_topk_workspace_size.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int]
    lib.fi_last_error.restype = ctypes.c_char_p
    return lib


def make_call(lib, logits, out, k, form, sorted_output=False):
    rows, width = logits.shape
    dev = logits.device
    ws_bytes = lib.fi_topk_workspace_size(rows, width, k)
    workspace = torch.empty(max(ws_bytes, 16), dtype=torch.uint8, device=dev)
    if form == "prefill":
        ks = torch.zeros(rows, dtype=torch.int32, device=dev)
        ke = torch.full((rows,), width, dtype=torch.int32, device=dev)
        lengths = None
    else:
        ks = ke = None
        lengths = torch.full((rows,), width, dtype=torch.int32, device=dev)
    keep = (workspace, ks, ke, lengths)
    dtype = 1 if logits.dtype == torch.bfloat16 else 0

    def call():
        stream = torch.cuda.current_stream().cuda_stream
        code = lib.fi_topk_per_row(
            out.data_ptr(), out.stride(0), logits.data_ptr(), dtype, rows, width,
            logits.stride(0), ks.data_ptr() if ks is not None else None,
            ke.data_ptr() if ke is not None else None,
            lengths.data_ptr() if lengths is not None else None, 1, k, int(sorted_output),
            workspace.data_ptr(), ws_bytes, stream)
        if code != 0:
            raise RuntimeError(lib.fi_last_error().decode())
    call.keep = keep
    return call


def check(logits, out, k, rows_to_check, sorted_output):
    for r in rows_to_check:
        ours = out[r].long()
        if sorted_output:
            got = logits[r].float()[ours]
            assert bool((got[:-1] >= got[1:]).all()), f"row {r}: sorted output not best first"
        assert int((ours < 0).sum()) == 0, f"row {r}: -1 in a full row"
        assert ours.unique().numel() == k, f"row {r}: duplicate indices"
        ref_vals, ref_idx = torch.topk(logits[r].float(), k, sorted=True)
        our_vals = logits[r].float()[ours].sort(descending=True).values
        assert torch.equal(our_vals, ref_vals), f"row {r}: selected values differ from torch.topk"
        if logits.dtype == torch.float32 and ref_vals.unique().numel() == k:
            assert torch.equal(ours.sort().values, ref_idx.sort().values), f"row {r}: index sets differ"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--shim", default="build-cuda/libflashindexer_bench_shim.so")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--sorted", action="store_true",
                        help="ours writes each row best first (torch.topk stays sorted=False)")
    add_only_argument(parser)
    args = parser.parse_args()
    lib = load_shim(args.shim)
    torch.manual_seed(0)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"median of {args.iters} CUDA-event timings, L2 flushed before each call"
          f"{'; ours sorted best first' if args.sorted else ''}\n")
    print("| case | ours ms | torch.topk ms | speedup | ours TB/s (logits read) "
          "| ours graph ms | torch graph ms | graph speedup |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, rows, width, k, dtype, form, offset in CASES:
        if not selected(args.only, name):
            continue
        logits = (torch.randn(rows, width, device="cuda") + offset).to(dtype)
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        call = make_call(lib, logits, out, k, form, args.sorted)
        call()
        torch.cuda.synchronize()
        check(logits, out, k, sorted({0, rows // 2, rows - 1}), args.sorted)
        first = out.clone()
        call()
        torch.cuda.synchronize()
        assert torch.equal(first, out), f"{name}: repeat run not bit-identical"
        iters = args.iters if rows * width >= (1 << 26) else args.iters * 4
        ours = event_median_ms(call, iters, before=flush.zero_)

        def theirs_call(logits=logits):
            return torch.topk(logits, k, dim=1, sorted=False)

        theirs = event_median_ms(theirs_call, iters, before=flush.zero_)
        ours_graph_obj = capture_graph(call)
        ours_graph = event_median_ms(ours_graph_obj.replay, iters, before=flush.zero_)
        theirs_graph_obj = capture_graph(theirs_call)
        theirs_graph = event_median_ms(theirs_graph_obj.replay, iters, before=flush.zero_)
        out.fill_(-7)
        ours_graph_obj.replay()
        torch.cuda.synchronize()
        assert torch.equal(first, out), f"{name}: graph replay not bit-identical"
        tbps = rows * width * logits.element_size() / (ours * 1e-3) / 1e12
        print(f"| {name} | {ours:.4f} | {theirs:.4f} | {theirs / ours:.1f}x | {tbps:.2f} "
              f"| {ours_graph:.4f} | {theirs_graph:.4f} | {theirs_graph / ours_graph:.1f}x |",
              flush=True)
        del ours_graph_obj, theirs_graph_obj
        del logits, out, call, theirs_call
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
