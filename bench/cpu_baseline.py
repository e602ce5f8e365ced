# SPDX-License-Identifier: Apache-2.0
"""What a user would otherwise run: the indexer in PyTorch (or NumPy) on the same inputs.

`flashindexer bench` writes a case's inputs as raw little-endian files into a folder and runs

    python3 bench/cpu_baseline.py --dir DIR --mode prefill|decode|topk --rows M --keys N
        --heads H --dim D --k K --repeats R

(plus --threads T and --device cpu|cuda), which prints one JSON object: {"baseline": "torch" |
"numpy" | "torch-cuda", "median_ms": ...}. With --device cuda the same PyTorch code runs on the
GPU (timed with CUDA events, warm, as `flashindexer bench --device cuda` times our ops); it exits
with an error when PyTorch has no GPU. Inputs are the
dequantized FP8 operands a framework user holds (q [M, H, D] f32, keys [M or 1, N, D] f32,
kscale [M or 1, N] f32, weights [M, H] f32, ks/ke [M] i32) or, for topk, logits [M, N] f32.
The computation: einsum -> relu -> weighted head sum -> key scale -> mask outside [ks, ke) ->
top-k, in row chunks that keep the [rows, H, N] intermediate near 256 MiB (as a user would).
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

try:
    import torch
except ImportError:  # NumPy is the fallback baseline
    torch = None


def load(folder, name, dtype, shape):
    return np.fromfile(os.path.join(folder, name), dtype=dtype).reshape(shape)


def chunk_rows(heads, keys):
    return max(1, (256 << 20) // (4 * heads * keys))


def indexer_torch(q, keys, kscale, weights, ks, ke, k, decode):
    rows, _, _ = q.shape
    out = torch.empty(rows, k, dtype=torch.int64, device=q.device)
    step = chunk_rows(q.shape[1], keys.shape[-2])
    columns = torch.arange(keys.shape[-2], device=q.device)
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        if decode:  # every row has its own keys
            scores = torch.einsum("mhd,mnd->mhn", q[begin:end], keys[begin:end])
            scale = kscale[begin:end]
        else:
            scores = torch.einsum("mhd,nd->mhn", q[begin:end], keys[0])
            scale = kscale[0]
        logits = (scores.relu_() * weights[begin:end, :, None]).sum(1) * scale
        visible = (columns >= ks[begin:end, None]) & (columns < ke[begin:end, None])
        logits.masked_fill_(~visible, float("-inf"))
        out[begin:end] = torch.topk(logits, k, dim=1, sorted=False).indices
    return out


def indexer_numpy(q, keys, kscale, weights, ks, ke, k, decode):
    rows, heads, dim = q.shape
    out = np.empty((rows, k), dtype=np.int64)
    step = chunk_rows(heads, keys.shape[-2])
    columns = np.arange(keys.shape[-2])
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        if decode:
            scores = np.matmul(q[begin:end], keys[begin:end].transpose(0, 2, 1))
            scale = kscale[begin:end]
        else:
            scores = (q[begin:end].reshape(-1, dim) @ keys[0].T).reshape(end - begin, heads, -1)
            scale = kscale[0]
        logits = (np.maximum(scores, 0) * weights[begin:end, :, None]).sum(1) * scale
        visible = (columns >= ks[begin:end, None]) & (columns < ke[begin:end, None])
        logits[~visible] = -np.inf
        out[begin:end] = np.argpartition(-logits, k - 1, axis=1)[:, :k]
    return out


def main():
    parser = argparse.ArgumentParser()
    for name in ("--dir", "--mode"):
        parser.add_argument(name, required=True)
    for name in ("--rows", "--keys", "--heads", "--dim", "--k", "--repeats"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    cuda = args.device == "cuda"
    if cuda and (torch is None or not torch.cuda.is_available()):
        raise SystemExit("--device cuda needs PyTorch with a visible GPU")
    place = (lambda x: torch.from_numpy(x).cuda()) if cuda else torch.from_numpy if torch else None
    rows, keys_n = args.rows, args.keys
    if torch is not None and args.threads > 0:
        torch.set_num_threads(args.threads)

    if args.mode == "topk":
        logits = load(args.dir, "logits.bin", np.float32, (rows, keys_n))
        if torch is not None:
            tensor = place(logits)
            run = lambda: torch.topk(tensor, args.k, dim=1, sorted=False)
        else:
            run = lambda: np.argpartition(-logits, args.k - 1, axis=1)[:, : args.k]
    else:
        decode = args.mode == "decode"
        key_rows = rows if decode else 1
        inputs = (
            load(args.dir, "q.bin", np.float32, (rows, args.heads, args.dim)),
            load(args.dir, "keys.bin", np.float32, (key_rows, keys_n, args.dim)),
            load(args.dir, "kscale.bin", np.float32, (key_rows, keys_n)),
            load(args.dir, "weights.bin", np.float32, (rows, args.heads)),
            load(args.dir, "ks.bin", np.int32, (rows,)),
            load(args.dir, "ke.bin", np.int32, (rows,)),
        )
        if torch is not None:
            tensors = [place(x) for x in inputs]
            run = lambda: indexer_torch(*tensors, args.k, decode)
        else:
            run = lambda: indexer_numpy(*inputs, args.k, decode)

    if cuda:
        try:
            from .timing import event_median_ms
        except ImportError:  # run as a script: timing.py is beside it
            from timing import event_median_ms

        median_ms = event_median_ms(run, max(args.repeats, 5), warmup=1)
    else:
        run()  # warm-up
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        median_ms = statistics.median(times)
    name = "torch-cuda" if cuda else "torch" if torch is not None else "numpy"
    print(json.dumps({"baseline": name, "median_ms": median_ms}))


if __name__ == "__main__":
    main()
