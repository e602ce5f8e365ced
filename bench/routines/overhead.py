# SPDX-License-Identifier: Apache-2.0
"""What one eager call costs against the same call in a CUDA graph: decode (H = 64, page 64,
next_n 1, k = 2048) through the Python module on PyTorch tensors.

Per op and batch: ours = eager calls back to back, to the last one's completion (us per call);
baseline = the graph replay per call (the GPU's own time); rate = the host time of one eager
call (its Python layer, argument checks and launches, measured right after a sync, while the
GPU queue is not full). graph / eager near 1: the GPU sets the pace; well below 1: the host.
"""
import time

import torch

from .. import cases
from ..inputs import DecodeInputs
from ..report import Row, Table
from ..timing import capture_graph, event_median_ms

CALLS = 20


def host_us(call, calls=CALLS):
    """Median host time of `calls` eager calls issued right after a sync (us)."""
    times = []
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2]


def eager_us(call, calls=200):
    """Eager calls back to back, to the last one's completion (us per call)."""
    call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def graph_us(call):
    graph = capture_graph(call, CALLS)
    return min(event_median_ms(graph.replay, 10) for _ in range(3)) / CALLS * 1e3


def _batch(ctx, fi, k, batch, width, workspace, table):
    inputs = DecodeInputs(64, batch, width, 1, False)
    cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
    logits = torch.empty(batch, inputs.width, device="cuda")
    out = torch.empty(batch, k, dtype=torch.int32, device="cuda")
    topk_workspace = torch.empty(
        max(fi.topk_per_row_cuda_workspace_size(batch, inputs.width, k), 16),
        dtype=torch.uint8, device="cuda")
    calls = {
        "indexer_decode": lambda: fi.indexer_decode(
            inputs.q, cache, inputs.weights, inputs.lens, inputs.table, k, out=out,
            workspace=workspace),
        "paged_mqa_logits": lambda: fi.paged_mqa_logits(
            inputs.q, cache, inputs.weights, inputs.lens, inputs.table, clean=False,
            out=logits),
        "topk_per_row": lambda: fi.topk_per_row(logits, k, lengths=inputs.lens, out=out,
                                                workspace=topk_workspace),
    }
    for op, call in calls.items():
        name = f"{op} b{batch}"
        if not cases.selected(ctx.only, name):
            continue
        call()
        torch.cuda.synchronize()
        table.add(Row(name, eager_us(call), graph_us(call), host_us(call), None, None,
                      ctx.command("overhead", name)))


def run(ctx):
    import flashindexer as fi

    k = cases.K
    batches, width = cases.overhead(ctx.preset)
    table = Table(f"Call overhead (decode, H = 64, {width} keys, k = {k})", "us",
                  "CUDA graph replay", "host us", None, command=ctx.command("overhead"),
                  notes="ours: eager calls back to back; baseline: the same call replayed "
                        "from a CUDA graph; rate column: host time of one eager call.")
    ctx.start(table)
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8, device="cuda")
    for batch in batches:
        _batch(ctx, fi, k, batch, width, workspace, table)
        torch.cuda.empty_cache()
    return [table]
