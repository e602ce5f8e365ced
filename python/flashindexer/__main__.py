# SPDX-License-Identifier: Apache-2.0
"""``python -m flashindexer run|bench|info``: the CLI's three commands, through the binding.

The C++ ``flashindexer`` tool (``make build``) drives bigger, engine-shaped workloads; this one
needs nothing but the installed package and NumPy:

* ``info``  prints the build (version, compiler, CUDA backend and archs) and the visible GPUs.
* ``run``   runs a prefill chunk and a paged decode batch (next_n 1 and 2) on synthetic inputs
            on the CPU or a GPU, checks on every row that the indexer selects the set
            ``topk_per_row`` selects from the dense logits, and verifies a sample of rows against
            ``flashindexer.reference``; exits 1 on a mismatch, 2 when the device cannot run it.
            It takes the arguments of ``flashindexer run`` (``--device``, ``--preset``,
            ``--format``, ``--seed``, ``--verify-rows``) with the same meaning; on CUDA it needs
            PyTorch.
* ``bench`` times indexer_prefill, indexer_decode and topk_per_row on the CPU against the same
            computation in NumPy (the reference scoring plus ``np.argpartition``).
"""

import argparse
import sys
import time

import numpy as np

import flashindexer as fi
from flashindexer import reference

# name: (prefill rows, prefill keys, decode batch, decode context, heads, k). The names, heads
# and k are those of `flashindexer run --preset` (tools/cli/workload.cpp); the shapes are smaller.
PRESETS = {
    "small": (32, 2048, 4, 1500, 32, 64),
    "v32": (64, 8192, 8, 8192, 64, 2048),
    "v4flash": (64, 8192, 8, 8192, 64, 512),
    "glm5": (64, 8192, 8, 8192, 32, 2048),
    "v41flash": (64, 8192, 8, 8192, 32, 512),
    "v41small": (32, 2048, 4, 1500, 32, 64),
}
# DeepSeek-V4.1 two-level presets: (C candidate blocks, cb positions per block) of the candidate
# source whose blocks a consumer layer on the same rows selects inside.
CANDIDATE_PRESETS = {"v41flash": (2048, 8), "v41small": (12, 8)}
RUN_DEFAULT_PRESET = "v32"  # as `flashindexer run`
BENCH_DEFAULT_PRESET = "small"
EXIT_MISMATCH = 1
EXIT_FAILURE = 2


def _quantized_queries(x, lead, mxfp4):
    """f32 query heads [prod(lead), D] quantized: FP8 values [*lead, D] (their scales dropped,
    as the weights would hold them), or MXFP4 (values [*lead, D/2], scales [*lead, D/32])."""
    if not mxfp4:
        return fi.quantize_k_fp8(x).values.reshape(*lead, x.shape[-1])
    q = fi.quantize_mxfp4(x)
    return fi.QuantizedTensor(q.values.reshape(*lead, -1), q.scales.reshape(*lead, -1))


def _take(q, index):
    """Rows `index` of a query (a QuantizedTensor for MXFP4) along its first dimension."""
    if isinstance(q, fi.QuantizedTensor):
        return fi.QuantizedTensor(q.values[index], q.scales[index])
    return q[index]


def _leading(q):
    return (q.values if isinstance(q, fi.QuantizedTensor) else q).shape


def _workload(preset, seed, format="fp8"):
    rows, keys_count, batch, context, heads, k = PRESETS[preset]
    rng = np.random.default_rng(seed)
    d = 128
    mxfp4 = format == "mxfp4"
    quantize_keys = fi.quantize_mxfp4 if mxfp4 else fi.quantize_k_fp8
    q = _quantized_queries(rng.standard_normal((rows * heads, d), np.float32), (rows, heads),
                           mxfp4)
    keys = quantize_keys(rng.standard_normal((keys_count, d), np.float32))
    weights = rng.standard_normal((rows, heads), np.float32)
    # Causal rows of one request at the end of the chunk, with a few empty and short rows.
    ke = np.linspace(keys_count // 2, keys_count, rows).astype(np.int32)
    ks = np.zeros(rows, np.int32)
    ks[1::4] = ke[1::4] - np.minimum(ke[1::4], k // 2)
    prefill = dict(q=q, keys=keys, weights=weights, ks=ks, ke=ke, k=k)
    lengths = rng.integers(1, context + 1, batch)
    sequences = [rng.standard_normal((n, d), np.float32) for n in lengths]
    paged = fi.build_k_cache(sequences, page_size=64, format=format, shuffle_pages=True, seed=seed)
    decode = []
    for next_n in (1, 2):
        q_decode = _quantized_queries(
            rng.standard_normal((batch * next_n * heads, d), np.float32), (batch, next_n, heads),
            mxfp4)
        decode.append(dict(q=q_decode, cache=paged.cache,
                           weights=rng.standard_normal((batch * next_n, heads), np.float32),
                           context_lens=paged.seq_lens, block_table=paged.block_table, k=k))
    return prefill, decode


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


class DeviceUnavailable(Exception):
    """The device asked for cannot run the workload; the message says why."""


def _run_device(requested):
    """'cpu' or 'cuda' for --device, as `flashindexer run` picks it: auto is CUDA when this build
    has the CUDA backend and a GPU is visible (and here PyTorch with CUDA holds the tensors)."""
    if requested == "cpu":
        return "cpu"
    gpus = fi.cuda_device_count()
    if requested == "auto" and gpus == 0:
        return "cpu"
    if not fi.build_info()["cuda"]:
        raise DeviceUnavailable("this build has no CUDA backend (-DFLASHINDEXER_CUDA=ON)")
    if gpus == 0:
        raise DeviceUnavailable("no CUDA device is visible")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        if requested == "auto":
            print("note: PyTorch with CUDA is not importable, so the GPU cannot hold the "
                  "tensors: running on the CPU")
            return "cpu"
        raise DeviceUnavailable("--device cuda needs PyTorch with CUDA to hold the tensors "
                                "(pip install torch)")
    return "cuda"


def _to_device(x, device):
    """`x` (a NumPy array) on `device`; 8-bit floats travel as their bytes."""
    if device == "cpu" or x is None:
        return x
    import torch

    array = np.array(x)  # a writable, contiguous copy, as torch.from_numpy wants
    if array.dtype.itemsize == 1 and array.dtype != np.uint8:
        array = array.view(np.uint8)
    return torch.from_numpy(array).cuda()


def _host(x):
    return x.cpu().numpy() if hasattr(x, "cpu") else np.asarray(x)


def _on_device(prefill, decodes, device):
    """The workload's operands on `device` (the NumPy originals stay for the reference)."""
    def move(operands):
        moved = {}
        for name, value in operands.items():
            if isinstance(value, fi.QuantizedTensor):
                value = fi.QuantizedTensor(_to_device(value.values, device),
                                           _to_device(value.scales, device))
            elif isinstance(value, fi.PagedKCache):
                value = fi.PagedKCache(_to_device(value.data, device), value.page_size,
                                       value.head_dim, value.format)
            elif isinstance(value, np.ndarray):
                value = _to_device(value, device)
            moved[name] = value
        return moved
    return move(prefill), [move(decode) for decode in decodes]


def _sample(rows, count):
    """Up to `count` rows spread evenly over `rows`, the last (it sees the most keys) included."""
    count = min(count, rows)
    if count <= 0:
        return np.zeros(0, np.int64)
    return np.unique(np.linspace(rows - 1, 0, count).round().astype(np.int64))


def _same_sets(name, selected, dense, k):
    """Every row of the indexer's output holds the set topk_per_row selects from the logits."""
    got = np.sort(selected[:, :k], axis=1)
    expected = np.sort(dense[:, :k], axis=1)
    bad = np.flatnonzero(np.any(got != expected, axis=1))
    if bad.size:
        print(f"{name}: MISMATCH: {bad.size} rows differ from topk_per_row(logits), "
              f"first row {bad[0]}")
        return False
    return True


def _oracle(name, selected, exact, tolerance, k, starts, rows):
    """The sampled `rows` of the indexer's output against the reference scores of those rows."""
    try:
        reference.check_topk(selected, exact, k, tolerance, starts)
    except AssertionError as error:
        print(f"{name}: MISMATCH against the reference: {error} (of rows {rows.tolist()})")
        return False
    return True


def _numpy_consumer(logits, ks, ke, candidates, block_size, k):
    """The exact consumer restated: the k best positions of the row inside the named blocks
    (larger first, NaN last, then the smaller position), -1 past them."""
    out = np.full((logits.shape[0], k), -1, np.int32)
    for t in range(logits.shape[0]):
        named = set(candidates[t][candidates[t] >= 0].tolist())
        scores = logits[t, ks[t]:ke[t]]
        inside = [p for p in range(ke[t] - ks[t]) if p // block_size in named]
        best = sorted(inside, key=lambda p: (np.isnan(scores[p]),
                                             0.0 if np.isnan(scores[p]) else -scores[p], p))[:k]
        out[t, :len(best)] = best
    return out


def _run_candidates(preset, on_prefill, logits, rows):
    """The V4.1 layers on the prefill chunk: a candidate source over its logits, then a consumer
    layer on the same rows; its output equals the consumer's selection over the same logits on
    every row and a NumPy restatement on the sampled rows."""
    num_blocks, block_size = CANDIDATE_PRESETS[preset]
    k, ks, ke = on_prefill["k"], on_prefill["ks"], on_prefill["ke"]
    candidates = fi.select_candidate_blocks(logits, num_blocks, block_size, ks=ks, ke=ke)
    top = _host(fi.indexer_prefill(**on_prefill, sorted=True, candidates=candidates,
                                   candidate_block_size=block_size))
    expected = _host(fi.candidate_topk_per_row(logits, candidates, block_size, k, ks=ks, ke=ke,
                                               sorted=True))
    ok = _same_sets("consumer indexer_prefill", top, expected, k)
    host_logits, host_candidates = _host(logits), _host(candidates)
    host_ks, host_ke = _host(ks), _host(ke)
    restated = _numpy_consumer(host_logits[rows], host_ks[rows], host_ke[rows],
                               host_candidates[rows], block_size, k)
    if not np.array_equal(top[rows], restated):
        print("consumer indexer_prefill: MISMATCH against the restated consumer")
        ok = False
    print(f"candidate source (C={num_blocks}, cb={block_size}) + consumer indexer_prefill: "
          f"{top.shape[0]} rows equal candidate_topk_per_row(logits), {rows.size} verified "
          "against the restated consumer")
    return ok


def _run_on(device, prefill, decodes, verify_rows, preset=None):
    """Runs and checks the workload on `device`; True when every check passes."""
    # The CUDA scoring sums FP8 products (MXFP4 converted to e4m3 exactly) on tensor cores.
    tensor_cores = device == "cuda"
    on_prefill, on_decodes = _on_device(prefill, decodes, device)
    ok = True

    k = prefill["k"]
    top = _host(fi.indexer_prefill(**on_prefill, sorted=True))
    logits = fi.mqa_logits(on_prefill["q"], on_prefill["keys"], on_prefill["weights"],
                           on_prefill["ks"], on_prefill["ke"])
    dense = _host(fi.topk_per_row(logits, k, ks=on_prefill["ks"], ke=on_prefill["ke"]))
    ok &= _same_sets("indexer_prefill", top, dense, k)
    rows = _sample(top.shape[0], verify_rows)
    if rows.size:
        part = {name: _take(prefill[name], rows) for name in ("q", "weights", "ks", "ke")}
        exact = reference.mqa_logits(part["q"], prefill["keys"], part["weights"], part["ks"],
                                     part["ke"]).astype(np.float64)
        tolerance = reference.score_tolerance(part["q"], prefill["keys"], part["weights"],
                                              tensor_cores=tensor_cores)
        ok &= _oracle("indexer_prefill", top[rows], exact, tolerance, k, part["ks"], rows)
    print(f"indexer_prefill: {top.shape[0]} rows equal topk_per_row(logits), {rows.size} "
          "verified against the reference")
    if preset in CANDIDATE_PRESETS:
        ok &= _run_candidates(preset, on_prefill, logits, rows)

    # The decode batches share verify_rows evenly, as in `flashindexer run`.
    for index, (decode, on_decode) in enumerate(zip(decodes, on_decodes)):
        share = verify_rows // len(decodes) + (index < verify_rows % len(decodes))
        batch, next_n = _leading(decode["q"])[:2]
        k = decode["k"]
        top = _host(fi.indexer_decode(**on_decode, sorted=True))
        logits = fi.paged_mqa_logits(on_decode["q"], on_decode["cache"], on_decode["weights"],
                                     on_decode["context_lens"], on_decode["block_table"])
        dense = _host(fi.topk_per_row(logits, k, lengths=on_decode["context_lens"],
                                      next_n=next_n))
        name = f"indexer_decode next_n={next_n}"
        ok &= _same_sets(name, top, dense, k)
        rows = _sample(top.shape[0], share)
        if rows.size:
            # The reference scores whole requests: those holding the sampled rows.
            requests = np.unique(rows // next_n)
            heads = decode["weights"].shape[1]
            weights = decode["weights"].reshape(batch, next_n, heads)[requests].reshape(-1, heads)
            part = (_take(decode["q"], requests), decode["cache"], weights,
                    decode["context_lens"][requests], decode["block_table"][requests])
            exact = reference.paged_mqa_logits(*part).astype(np.float64)
            tolerance = reference.paged_score_tolerance(*part, tensor_cores=tensor_cores)
            local = np.searchsorted(requests, rows // next_n) * next_n + rows % next_n
            ok &= _oracle(name, top[rows], exact[local], tolerance[local], k, None, rows)
        print(f"{name}: {top.shape[0]} rows equal topk_per_row(logits), {rows.size} verified "
              "against the reference")
    return ok


def command_run(args):
    try:
        device = _run_device(args.device)
    except DeviceUnavailable as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    prefill, decodes = _workload(args.preset, args.seed, args.format)
    print(f"flashindexer {fi.__version__} run: preset {args.preset}, format {args.format}, "
          f"device {device}, seed {args.seed}")
    try:
        ok = _run_on(device, prefill, decodes, args.verify_rows, args.preset)
    except NotImplementedError as error:
        if args.device != "auto" or device == "cpu":
            print(f"error: {error}", file=sys.stderr)
            return EXIT_FAILURE
        print(f"note: the CUDA backend does not run this workload ({error}): running on the CPU")
        ok = _run_on("cpu", prefill, decodes, args.verify_rows, args.preset)
    print("PASS" if ok else "FAIL")
    return 0 if ok else EXIT_MISMATCH


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


def _non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m flashindexer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="the build and the visible GPUs")
    # The arguments of `flashindexer run` (tools/cli/main.cpp), with the same meaning.
    run = commands.add_parser("run", help="run and verify a synthetic workload")
    run.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                     help="device to run on (auto: CUDA when a GPU is visible; default auto)")
    run.add_argument("--preset", choices=sorted(PRESETS), default=RUN_DEFAULT_PRESET,
                     help=f"workload (default {RUN_DEFAULT_PRESET})")
    run.add_argument("--format", choices=("fp8", "mxfp4"), default="fp8",
                     help="K cache and query format (default fp8)")
    run.add_argument("--seed", type=int, default=1, help="seed of the workload (default 1)")
    run.add_argument("--verify-rows", type=_non_negative, default=8,
                     help="rows per phase (prefill; decode, split over its batches) checked "
                          "against the reference oracle (default 8)")
    bench = commands.add_parser("bench", help="time the CPU ops against NumPy")
    bench.add_argument("--preset", choices=sorted(PRESETS), default=BENCH_DEFAULT_PRESET)
    bench.add_argument("--seed", type=int, default=1)
    bench.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    return {"info": command_info, "run": command_run, "bench": command_bench}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
