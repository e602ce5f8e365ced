"""``python -m flashindexer run|bench|info``: the CLI's three commands, through the binding.

The C++ ``flashindexer`` tool (``make build``) drives bigger, engine-shaped workloads; this one
needs nothing but the installed package and NumPy:

* ``info``  prints the build (version, compiler, CUDA backend and archs) and the visible GPUs.
* ``run``   runs a prefill chunk and a paged decode batch (next_n 1 and 2) on synthetic inputs
            and verifies every row against ``flashindexer.reference``; exits 1 on a mismatch.
* ``bench`` times indexer_prefill, indexer_decode and topk_per_row on the CPU against the same
            computation in NumPy (the reference scoring plus ``np.argpartition``).
"""

import argparse
import sys
import time

import numpy as np

import flashindexer as fi
from flashindexer import reference

# name: (prefill rows, prefill keys, decode batch, decode context, heads, k)
PRESETS = {
    "small": (32, 2048, 4, 1500, 32, 64),
    "v32": (64, 8192, 8, 8192, 64, 2048),
}


def _workload(preset, seed):
    rows, keys_count, batch, context, heads, k = PRESETS[preset]
    rng = np.random.default_rng(seed)
    d = 128
    q = fi.quantize_k_fp8(rng.standard_normal((rows * heads, d), np.float32)).values
    keys = fi.quantize_k_fp8(rng.standard_normal((keys_count, d), np.float32))
    weights = rng.standard_normal((rows, heads), np.float32)
    # Causal rows of one request at the end of the chunk, with a few empty and short rows.
    ke = np.linspace(keys_count // 2, keys_count, rows).astype(np.int32)
    ks = np.zeros(rows, np.int32)
    ks[1::4] = ke[1::4] - np.minimum(ke[1::4], k // 2)
    prefill = dict(q=q.reshape(rows, heads, d), keys=keys, weights=weights, ks=ks, ke=ke, k=k)
    lengths = rng.integers(1, context + 1, batch)
    sequences = [rng.standard_normal((n, d), np.float32) for n in lengths]
    paged = fi.build_k_cache(sequences, page_size=64, shuffle_pages=True, seed=seed)
    decode = []
    for next_n in (1, 2):
        q_decode = fi.quantize_k_fp8(
            rng.standard_normal((batch * next_n * heads, d), np.float32)).values
        decode.append(dict(q=q_decode.reshape(batch, next_n, heads, d), cache=paged.cache,
                           weights=rng.standard_normal((batch * next_n, heads), np.float32),
                           context_lens=paged.seq_lens, block_table=paged.block_table, k=k))
    return prefill, decode


def _verify(name, selected, exact, tolerance, k, starts=None):
    try:
        reference.check_topk(selected, exact, k, tolerance, starts)
    except AssertionError as error:
        print(f"{name}: MISMATCH: {error}")
        return False
    print(f"{name}: {selected.shape[0]} rows verified against the reference")
    return True


def command_info(_args):
    info = fi.build_info()
    print(f"flashindexer {info['version']} (Python binding)")
    print(f"compiler: {info['compiler']}")
    print(f"CUDA backend: {'yes, ' + info['cuda_archs'] if info['cuda'] else 'no'}")
    print(f"CUDA devices visible: {fi.cuda_device_count()}")
    for device in range(fi.cuda_device_count()):
        runs, why = fi.cuda_device_runs_kernels(device, reason=True)
        print(f"  cuda:{device}: {'runs the kernels' if runs else why}")
    print(f"numpy {np.__version__}")
    return 0


def command_run(args):
    prefill, decodes = _workload(args.preset, args.seed)
    ok = True
    top = fi.indexer_prefill(**prefill, sorted=True)
    exact = reference.mqa_logits(prefill["q"], prefill["keys"], prefill["weights"], prefill["ks"],
                                 prefill["ke"]).astype(np.float64)
    tolerance = reference.score_tolerance(prefill["q"], prefill["keys"], prefill["weights"])
    ok &= _verify("indexer_prefill", top, exact, tolerance, prefill["k"], prefill["ks"])
    for decode in decodes:
        top = fi.indexer_decode(**decode, sorted=True)
        exact = reference.paged_mqa_logits(decode["q"], decode["cache"], decode["weights"],
                                           decode["context_lens"], decode["block_table"])
        decode_tolerance = reference.paged_score_tolerance(
            decode["q"], decode["cache"], decode["weights"], decode["context_lens"],
            decode["block_table"])
        name = f"indexer_decode next_n={decode['q'].shape[1]}"
        ok &= _verify(name, top, exact.astype(np.float64), decode_tolerance, decode["k"])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def _time(body, repeats):
    body()
    start = time.perf_counter()
    for _ in range(repeats):
        body()
    return (time.perf_counter() - start) / repeats


def _numpy_prefill(p):
    logits = reference.mqa_logits(p["q"], p["keys"], p["weights"], p["ks"], p["ke"])
    return np.argpartition(-logits, p["k"] - 1, axis=1)[:, :p["k"]]


def command_bench(args):
    prefill, decodes = _workload(args.preset, args.seed)
    logits = fi.mqa_logits(prefill["q"], prefill["keys"], prefill["weights"], prefill["ks"],
                           prefill["ke"])
    k = prefill["k"]
    cases = [
        ("indexer_prefill", lambda: fi.indexer_prefill(**prefill), lambda: _numpy_prefill(prefill)),
        ("indexer_decode next_n=1", lambda: fi.indexer_decode(**decodes[0]), None),
        ("topk_per_row", lambda: fi.topk_per_row(logits, k, ks=prefill["ks"], ke=prefill["ke"]),
         lambda: np.argpartition(-logits, k - 1, axis=1)[:, :k]),
    ]
    print(f"{'case':<26} {'ours ms':>10} {'numpy ms':>10} {'speedup':>8}")
    for name, ours, baseline in cases:
        ours_s = _time(ours, args.repeats)
        base_s = _time(baseline, 1) if baseline else float("nan")
        print(f"{name:<26} {ours_s * 1e3:>10.3f} {base_s * 1e3:>10.3f} {base_s / ours_s:>8.1f}")
    print(f"reproduce: python -m flashindexer bench --preset {args.preset} "
          f"--repeats {args.repeats}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flashindexer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="the build and the visible GPUs")
    for name, help_text in (("run", "run and verify a synthetic workload"),
                            ("bench", "time the CPU ops against NumPy")):
        sub = commands.add_parser(name, help=help_text)
        sub.add_argument("--preset", choices=sorted(PRESETS), default="small")
        sub.add_argument("--seed", type=int, default=1)
        if name == "bench":
            sub.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    return {"info": command_info, "run": command_run, "bench": command_bench}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
