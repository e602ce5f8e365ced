# SPDX-License-Identifier: Apache-2.0
"""python -m bench <routine> [--preset quick|full] [--markdown PATH] [--iters N] [--only TEXT]

The product benchmark of FlashIndexer, over its Python module: every op on the cases of
bench/cases.py against a same-run peer (PyTorch on the GPU, NumPy on the CPU) and the same-run
ceilings, with the other projects' numbers quoted from an earlier run in their own column.
Routines: topk, scoring, indexer, mxfp4, dequantize, kcache, query, overhead, candidates
(GPU); cpu; planning (host step planning, either device); all (every routine the device runs). --markdown PATH writes the tables as one
page (docs/benchmarks.md). Method: bench/README.md.
"""
import argparse
import importlib
import sys
import time
import traceback

from . import report

GPU_ROUTINES = ("scoring", "topk", "indexer", "mxfp4", "dequantize", "kcache", "query", "overhead",
                "candidates")
HOST_ROUTINES = ("planning",)  # host work: run on either device
ROUTINES = GPU_ROUTINES + ("cpu",) + HOST_ROUTINES


class Context:
    """What every routine reads: the options, and the ceilings, measured once per run."""

    def __init__(self, args):
        self.args = args
        self.preset, self.only, self.k, self.warm_ms = args.preset, args.only, args.k, args.warm_ms
        self._gpu = self._cpu = None
        self.tables = []
        self.ceilings_text = []

    def start(self, table):
        """Prints a table's header and keeps it for the page, even if its routine fails later."""
        self.tables.append(table)
        table.start()

    def iters(self, default):
        return self.args.iters or (default if self.preset == "full" else max(3, default // 3))

    def command(self, routine, case=None):
        """The command that reproduces a table (case None) or one of its rows."""
        text = f"python -m bench {routine} --preset {self.preset}"
        if routine == "cpu" or self.args.device == "cpu":
            text += " --device cpu"
        if routine == "indexer" and self.k != 2048:
            text += f" --k {self.k}"
        return text + (f' --only "{case}"' if case else "")

    def gpu_ceilings(self):
        if self._gpu is None:
            from .ceilings import GpuCeilings

            progress("measuring the GPU ceilings")
            self._gpu = GpuCeilings(10, self.warm_ms)
            self.ceilings_text.append(self._gpu.describe())
            print(f"same-run GPU ceilings: {self._gpu.describe()}", flush=True)
        return self._gpu

    def cpu_ceilings(self):
        if self._cpu is None:
            from .ceilings import CpuCeilings

            progress("measuring the CPU ceilings")
            self._cpu = CpuCeilings()
            self.ceilings_text.append(self._cpu.describe())
            print(f"same-run CPU ceilings: {self._cpu.describe()}", flush=True)
        return self._cpu


START = time.perf_counter()


def progress(text):
    print(f"[bench {time.perf_counter() - START:6.1f} s] {text}", file=sys.stderr, flush=True)


def gpu_available():
    try:
        import torch
    except ImportError:
        return False
    import flashindexer as fi

    return (torch.cuda.is_available() and fi.build_info().get("cuda")
            and fi.cuda_device_runs_kernels(torch.cuda.current_device()))


def parse(argv):
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("routine", choices=ROUTINES + ("all",))
    parser.add_argument("--preset", choices=("quick", "full"), default="full",
                        help="full: the published shapes; quick: small shapes, seconds")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto",
                        help="auto: the GPU when this build and machine run its kernels")
    parser.add_argument("--markdown", metavar="PATH", help="write the tables as one page")
    parser.add_argument("--iters", type=int, default=0,
                        help="timed calls per measurement (0: each routine's default)")
    parser.add_argument("--only", default="",
                        help="comma-separated substrings: the cases whose name has one")
    parser.add_argument("--k", type=int, default=2048, help="the indexer routine's k")
    parser.add_argument("--warm-ms", type=int, default=300,
                        help="ms of back-to-back calls before a GPU scoring measurement")
    return parser.parse_args(argv)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    import flashindexer as fi

    gpu = gpu_available()
    if args.device == "auto":
        args.device = "cuda" if gpu else "cpu"
    if args.device == "cuda" and not gpu:
        raise SystemExit("bench --device cuda: needs PyTorch with CUDA, a CUDA build of "
                         "flashindexer and a compute capability 9.0 GPU")
    routines = [args.routine] if args.routine != "all" else (
        list(ROUTINES) if args.device == "cuda" else ["cpu", *HOST_ROUTINES])
    if args.device == "cpu" and any(r in GPU_ROUTINES for r in routines):
        raise SystemExit(f"bench {args.routine}: a GPU routine; on the CPU run `cpu` or `all`")
    ctx = Context(args)
    print(f"# python -m bench {' '.join(argv)}\n{report.machine(args.device)}; "
          f"build {report.build(fi)}", flush=True)
    failed = []
    for name in routines:
        progress(f"{name} ({args.preset})")
        module = importlib.import_module(f".routines.{name}", __package__)
        try:
            module.run(ctx)
        except Exception:  # a failed check or op: report it, keep the other routines' tables
            traceback.print_exc()
            failed.append(name)
            progress(f"{name} FAILED; continuing")
    progress("done" + (f", failed: {' '.join(failed)}" if failed else ""))
    if args.markdown:
        note = None
        if args.device == "cpu":
            note = ("This page comes from a CPU-only run: the GPU tables (scoring, top-k, "
                    "indexer, dequantize, call overhead) come from `python -m bench all "
                    "--markdown docs/benchmarks.md` on an H200, which rewrites it.")
        tables = [table for table in ctx.tables if table.rows]
        report.write_markdown(args.markdown, tables, argv, args.device, fi, ctx.ceilings_text,
                              note)
    if failed:
        raise SystemExit(f"bench: {len(failed)} routine(s) failed: {' '.join(failed)}")


if __name__ == "__main__":
    main()
