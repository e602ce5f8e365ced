#!/usr/bin/env python3
"""The CUDA indexer (indexer_prefill / indexer_decode, k = 2048 or --k), fused and dense, against
the dense pairs.

Runs the flashindexer Python module on torch CUDA tensors (build it first: `pip install .`, or
put a built flashindexer package on PYTHONPATH). Same run, same inputs, per case:
  * ours: the indexer op on its fused path (path="fused": no logits written) and on its dense
    path (path="dense": logits slab + top-k in batches), with a preallocated workspace of
    indexer_cuda_workspace_size(k) bytes;
  * our dense pair: mqa_logits (paged_mqa_logits) into a full logits tensor, then topk_per_row,
    each timed alone too;
  * the peer dense path: torch.topk on the same logits, plus the scoring time the same-run
    torch._scaled_mm FP8 ceiling would need for the visible pairs (a lower bound for any peer
    scoring kernel); the anchor column is DeepGEMM logits + torch.topk from
    ../shared/reference/anchors-h200.md (measured separately, printed for comparison).
Every case first checks that both indexer paths return exactly the dense pair's indices (sorted).
Times: CUDA-graph replay (GPU time, no launch cost), median of --iters replays, warm L2. The anchor
table has k = 2048 and next_n 1 only: other cases print "-" in its columns.

  python3 tools/bench/bench_indexer.py [--only H64] [--iters 10] [--k 512] [--next-n 1,2,4]
  python3 tools/bench/bench_indexer.py --long    # H64 16384 rows x 1M keys, the two paths only
"""
import argparse

import torch

import flashindexer as fi
from bench_logits import Ceilings, DecodeInputs, PrefillInputs, graph_ms, print_table
from bench_logits import add_only_argument, selected

K = 2048

# name, H, rows, keys, anchor dense ms (DeepGEMM + torch.topk), graph batch
PREFILL = [
    ("H64 4096x131072", 64, 4096, 131072, 16.45, 1),
    ("H32 4096x131072", 32, 4096, 131072, 12.38, 1),
    ("H64 2048x262144", 64, 2048, 262144, 16.62, 1),
    ("H32 2048x262144", 32, 2048, 262144, 12.54, 1),
    ("H64 4096x32768", 64, 4096, 32768, 4.09, 2),
]

# name, H, batch, ctx, anchor dense ms (DeepGEMM paged logits + torch.topk), graph batch
DECODE = [
    ("H64 b64 131072", 64, 64, 131072, 0.301 + 0.193, 5),
    ("H64 b64 32768", 64, 64, 32768, 0.089 + 0.122, 10),
    ("H64 b1 131072", 64, 1, 131072, 0.024 + 0.110, 10),
    ("H64 b128 131072", 64, 128, 131072, 0.568 + 0.307, 3),
]


def compare_and_time(name, run_indexer, run_logits, run_topk, logits, ranges, batch, iters, k):
    """Checks indexer == topk(logits) (sorted), then times all paths. Returns a dict of ms."""
    run_logits()  # not clean: top-k reads only the visible ranges
    expected = fi.topk_per_row(logits, k, sorted=True, **ranges)
    for path in ("fused", "dense"):
        got = run_indexer(sorted=True, path=path)
        torch.cuda.synchronize()
        assert torch.equal(got, expected), f"{name}: the {path} indexer differs from topk(logits)"
    out = torch.empty_like(got)
    topk_workspace = torch.empty(
        max(fi.topk_per_row_cuda_workspace_size(logits.shape[0], logits.shape[1], k), 16),
        dtype=torch.uint8, device="cuda")
    times = {
        "indexer": graph_ms(lambda: run_indexer(out=out, path="fused"), batch, iters),
        "dense indexer": graph_ms(lambda: run_indexer(out=out, path="dense"), batch, iters),
        "scoring": graph_ms(run_logits, batch, iters),
        "topk": graph_ms(lambda: run_topk(out, topk_workspace), batch, iters),
        "torch.topk": graph_ms(
            lambda: torch.topk(logits, k, dim=1, sorted=False), batch, iters),
    }
    return times


def row(name, times, flop, fp8_tflops, anchor):
    ceiling_scoring = flop / fp8_tflops / 1e9
    dense = times["scoring"] + times["topk"]
    peer = ceiling_scoring + times["torch.topk"]
    anchor_text = f"{anchor:.3f}" if anchor else "-"
    speedup = f"{anchor / times['indexer']:.2f}x" if anchor else "-"
    return (f"| {name} | {times['indexer']:.3f} | {times['dense indexer']:.3f} "
            f"| {times['scoring']:.3f} | {times['topk']:.3f} "
            f"| {dense:.3f} | {times['indexer'] / times['scoring']:.2f} "
            f"| {times['torch.topk']:.3f} | {peer:.3f} | {anchor_text} | {speedup} |")


class IndexerPrefillInputs(PrefillInputs):
    """PrefillInputs and a workspace of indexer_cuda_workspace_size(k) bytes for the indexer
    over them."""

    def __init__(self, heads, rows, keys, k=K, device="cuda"):
        super().__init__(heads, rows, keys, device)
        self.k = k
        self.workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8,
                                     device=device)

    def indexer(self, sorted=False, out=None, path="auto", workspace=None):
        """indexer_prefill over these inputs, in self.workspace unless `workspace` is given."""
        return fi.indexer_prefill(self.q, (self.keys, self.kscale), self.weights, self.ks,
                                  self.ke, self.k, sorted=sorted, out=out,
                                  workspace=self.workspace if workspace is None else workspace,
                                  path=path)


def bench_prefill(case, fp8_tflops, iters, k):
    name, heads, rows, keys, anchor, batch = case
    inputs = IndexerPrefillInputs(heads, rows, keys, k)
    ks, ke = inputs.ks, inputs.ke
    logits = torch.full((rows, keys), float("-inf"), device="cuda")

    def run_logits():
        fi.mqa_logits(inputs.q, (inputs.keys, inputs.kscale), inputs.weights, ks, ke, clean=False,
                      out=logits)

    def run_topk(out, topk_workspace):
        fi.topk_per_row(logits, k, ks=ks, ke=ke, out=out, workspace=topk_workspace)

    times = compare_and_time(name, inputs.indexer, run_logits, run_topk, logits,
                             {"ks": ks, "ke": ke}, batch, iters, k)
    pairs = int((ke.long() - ks.long()).sum())
    return row(name, times, 2 * pairs * heads * 128, fp8_tflops, anchor if k == K else 0)


def bench_decode(case, fp8_tflops, iters, k, next_n):
    name, heads, batch_size, ctx, anchor, batch = case
    inputs = DecodeInputs(heads, batch_size, ctx, next_n, False)
    cache = fi.PagedKCache(inputs.cache, inputs.page, 128, "fp8")
    # [B] lengths: row j of a request sees lens - next_n + j + 1 keys (row_lens: lens2d, one
    # length per row, for the top-k).
    lens = inputs.lens.to(device="cuda", dtype=torch.int32)
    row_lens = inputs.lens2d.reshape(-1).contiguous()
    logits = torch.full((batch_size * next_n, inputs.width), float("-inf"), device="cuda")
    workspace = torch.empty(fi.indexer_cuda_workspace_size(k), dtype=torch.uint8, device="cuda")

    def run_indexer(sorted=False, out=None, path="auto"):
        return fi.indexer_decode(inputs.q, cache, inputs.weights, lens, inputs.table, k,
                                 sorted=sorted, out=out, workspace=workspace, path=path)

    def run_logits():
        fi.paged_mqa_logits(inputs.q, cache, inputs.weights, lens, inputs.table, clean=False,
                            out=logits)

    def run_topk(out, topk_workspace):
        fi.topk_per_row(logits, k, lengths=row_lens, out=out, workspace=topk_workspace)

    times = compare_and_time(name, run_indexer, run_logits, run_topk, logits,
                             {"lengths": row_lens}, batch, iters, k)
    pairs = int(row_lens.long().sum())
    anchor = anchor if k == K and next_n == 1 else 0
    return row(name if next_n == 1 else f"{name} next_n {next_n}", times,
               2 * pairs * heads * 128, fp8_tflops, anchor)


def bench_long(heads, rows, keys, iters, k):
    """Both indexer paths alone (a [rows, keys] logits tensor would not be worth its 64 GiB)."""
    inputs = IndexerPrefillInputs(heads, rows, keys, k)

    def run(path, out=None):
        return inputs.indexer(sorted=True, out=out, path=path)

    dense = run("dense")
    fused = run("fused")
    assert torch.equal(fused, dense), "the fused indexer differs from the dense one"
    fused_ms = graph_ms(lambda: run("fused", out=fused), 1, iters)
    dense_ms = graph_ms(lambda: run("dense", out=dense), 1, iters)
    print(f"| H{heads} {rows}x{keys} | {fused_ms:.2f} | {dense_ms:.2f} | {fused_ms / dense_ms:.2f} |")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--k", type=int, default=K, help="the top-k of every case")
    parser.add_argument("--next-n", default="1",
                        help="comma-separated next_n of the decode cases (query rows per request)")
    add_only_argument(parser)
    parser.add_argument("--long", action="store_true",
                        help="only the 16384 x 1M-key prefill: both indexer paths, sorted")
    args = parser.parse_args()
    torch.manual_seed(0)
    ceil = Ceilings(args.iters, 0)
    fp8_tflops = ceil.fp8_tflops
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; same-run burst "
          f"ceilings: torch._scaled_mm FP8 8192^3 {fp8_tflops:.0f} TFLOP/s, D2D copy "
          f"{ceil.copy_gbs:.0f} GB/s; "
          f"k = {args.k}, times in ms")
    if args.long:
        print("\n| case | fused indexer ms | dense indexer ms | fused / dense |\n|---|---:|---:|---:|")
        bench_long(64, 16384, 1 << 20, args.iters, args.k)
        return
    columns = ["case", "fused indexer", "dense indexer", "our scoring", "our top-k", "our dense pair",
               "fused / scoring", "torch.topk", "FP8-ceiling scoring + torch.topk",
               "anchor dense (DeepGEMM + torch.topk)", "anchor / fused"]
    print_table("Prefill (causal-suffix rows)", columns,
                [c for c in PREFILL if selected(args.only, c[0])],
                lambda c: bench_prefill(c, fp8_tflops, args.iters, args.k))
    decode = [(c, int(n)) for n in args.next_n.split(",") for c in DECODE
              if selected(args.only, c[0])]
    print_table("Decode (page 64, equal lengths)", columns, decode,
                lambda c: bench_decode(c[0], fp8_tflops, args.iters, args.k, c[1]))


if __name__ == "__main__":
    main()
