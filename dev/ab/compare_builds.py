# SPDX-License-Identifier: Apache-2.0
"""Two or more builds of the bench shim, in alternation in one process, on the same inputs.

For a change whose effect is smaller than the spread between machines and runs: each round
times every shim on the same tensors, one after the other. Cases: indexer_decode (H = 64 or
--decode-heads, page 64, k = 2048 or --k) at batch 1 and 64 (--batches) of 131072 keys
(--decode-widths), next_n 1 (--next-n), dense and fused path, unsorted and sorted;
topk_per_row over [rows, 131072] fp32 logits (decode lengths) at 1 and 64 rows, unsorted and
sorted; indexer_prefill (causal-suffix rows, 131072 keys or --prefill-width, k = 2048 or --k)
at H = 64 and 32, dense and fused, unsorted (--prefill-rows; --prefill-requests packs equal
requests). The top-k cases keep k = 2048. Times in us: CUDA-graph replay of --calls
consecutive calls (per call; prefill: one call), warm L2, median of --iters (prefill: of 5).
Every shim must give the same indices (sorted output; unsorted compared as sets).

    python3 -m dev.ab.compare_builds old/libflashindexer_bench_shim.so \\
        build/libflashindexer_bench_shim.so
"""
import argparse

import torch

from bench.cases import selected
from bench.inputs import DecodeInputs, PrefillInputs
from bench.timing import capture_graph, event_median_ms
from dev.ab.shim import K, WIDTH, add_only_argument, indexer_call, load_shim, prefill_call
from dev.ab.shim import make_call as topk_call

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shims", nargs="+")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--calls", type=int, default=10, help="calls per captured graph")
    parser.add_argument("--prefill-rows", type=int, default=2048)
    parser.add_argument("--prefill-requests", type=int, default=1,
                        help="equal requests packed in the prefill chunk "
                        "(bench.inputs.chunk_ranges)")
    parser.add_argument("--prefill-width", type=int, default=WIDTH,
                        help="keys of the prefill cases (the last row sees them all)")
    parser.add_argument("--batches", default="1,64",
                        help="comma-separated decode batch sizes of the indexer cases")
    parser.add_argument("--decode-widths", default=str(WIDTH),
                        help="comma-separated context lengths of the indexer cases (cases of "
                             f"other lengths than {WIDTH} are named indexer bBATCHxLENGTH)")
    parser.add_argument("--decode-heads", type=int, default=64, choices=(32, 64),
                        help="H of the indexer cases (cases at H = 32 are named indexer H32 ...)")
    parser.add_argument("--next-n", default="1",
                        help="comma-separated next_n of the indexer cases (cases with next_n > 1 "
                             "are named indexer bBATCHnNEXT_N)")
    parser.add_argument("--k", type=int, default=K,
                        help=f"k of the indexer cases (with k other than {K}, a case's shape "
                             "ends in kK)")
    add_only_argument(parser)
    args = parser.parse_args()
    torch.manual_seed(0)
    k = args.k
    k_name = f" k{k}" if k != K else ""
    libs = [(path.split("/")[-1], load_shim(path)) for path in args.shims]
    workspace = torch.empty(libs[0][1].fi_indexer_workspace_size(max(k, K)), dtype=torch.uint8,
                            device="cuda")
    cases = []  # (name, make(lib, out) -> call, rows, sorted, calls per graph, k)
    decode_shapes = [(int(b), int(w), int(n)) for n in args.next_n.split(",")
                     for w in args.decode_widths.split(",") for b in args.batches.split(",")]
    for batch, width, next_n in decode_shapes:
        shape = "H32 " if args.decode_heads == 32 else ""
        shape += f"b{batch}" if width == WIDTH else f"b{batch}x{width}"
        shape += f"n{next_n}" if next_n > 1 else ""
        shape += k_name
        if not any(selected(args.only, f"indexer {shape} {p}{s}")
                   for p in ("dense", "fused") for s in ("", " sorted")):
            continue
        inputs = DecodeInputs(args.decode_heads, batch, width, next_n, False)
        for path, path_name in ((1, "dense"), (2, "fused")):
            for sorted_output in (False, True):
                name = f"indexer {shape} {path_name}{' sorted' if sorted_output else ''}"
                cases.append((name, lambda lib, out, i=inputs, b=batch, p=path, s=sorted_output,
                              n=next_n: indexer_call(lib, i, b, out, s, p, workspace, n, k),
                              batch * next_n, sorted_output, args.calls, k))
    for rows in (1, 64):
        logits = torch.randn(rows, WIDTH, device="cuda")
        for sorted_output in (False, True):
            name = f"topk {rows}x{WIDTH}{' sorted' if sorted_output else ''}"
            cases.append((name, lambda lib, out, x=logits, s=sorted_output:
                          topk_call(lib, x, out, K, "decode", s), rows, sorted_output, args.calls,
                          K))
    for heads in (64, 32):
        chunk = f"/{args.prefill_requests}" if args.prefill_requests > 1 else ""
        name = f"prefill H{heads} {args.prefill_rows}x{args.prefill_width}{chunk}{k_name}"
        if not selected(args.only, name):
            continue
        inputs = PrefillInputs(heads, args.prefill_rows, args.prefill_width,
                               requests=args.prefill_requests)
        for path, path_name in ((1, "dense"), (2, "fused")):
            cases.append((f"{name} {path_name}", lambda lib, out, i=inputs, p=path:
                          prefill_call(lib, i, out, p, workspace, k), args.prefill_rows, False, 1,
                          k))
    cases = [case for case in cases if selected(args.only, case[0])]
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}; us per call, graphs of "
          f"{args.calls} calls, median of {args.iters} replays, warm L2\n")
    print("| round | build | " + " | ".join(case[0] for case in cases) + " |")
    print("|---|---|" + "---:|" * len(cases))
    expected = {}
    for round_index in range(args.rounds):
        for shim_name, lib in libs:
            times = []
            for name, make, rows, sorted_output, calls, case_k in cases:
                out = torch.empty(rows, case_k, dtype=torch.int32, device="cuda")
                call = make(lib, out)
                call()
                torch.cuda.synchronize()
                got = out.clone() if sorted_output else out.sort(dim=1).values
                key = name.replace(" fused", "").replace(" dense", "")
                if key in expected:
                    assert torch.equal(expected[key], got), f"{shim_name} {name}: indices differ"
                else:
                    expected[key] = got
                graph = capture_graph(call, calls=calls)
                iters = args.iters if calls > 1 else 5
                times.append(event_median_ms(graph.replay, iters) / calls * 1e3)
            print(f"| {round_index} | {shim_name} | " + " | ".join(f"{t:.1f}" for t in times)
                  + " |", flush=True)


if __name__ == "__main__":
    main()
