# SPDX-License-Identifier: Apache-2.0
"""Tables of measured rows: printed as each row is measured, and written as docs/benchmarks.md
(a headline table first, then one table per op with its command, the machine and the build)."""
import datetime
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fmt_time(value):
    if value is None:
        return "-"
    return f"{value:.4f}" if value < 1 else f"{value:.3f}" if value < 100 else f"{value:.1f}"


def fmt_ratio(value):
    return "-" if value is None else f"{value:.2f}"


class Row:
    """One measured case. ours / baseline / anchor in the table's time unit; rate in the table's
    rate unit; fraction: rate over the same-run ceiling."""

    def __init__(self, case, ours, baseline=None, rate=None, fraction=None, anchor=None,
                 command="", headline=None):
        self.case, self.ours, self.baseline, self.anchor = case, ours, baseline, anchor
        self.rate, self.fraction, self.command = rate, fraction, command
        self.headline = headline  # the headline's op name when this row is one of its rows

    @property
    def ratio(self):
        return None if self.baseline is None or not self.ours else self.baseline / self.ours


class Table:
    """One op's table. baseline: the same-run peer's name; ceiling: what `fraction` is of;
    anchor: the other-run peer's name (numbers quoted from the anchor file), or None."""

    def __init__(self, title, unit, baseline, rate_unit, ceiling, anchor=None, command="",
                 notes=""):
        self.title, self.unit, self.baseline, self.rate_unit = title, unit, baseline, rate_unit
        self.ceiling, self.anchor, self.command, self.notes = ceiling, anchor, command, notes
        self.rows = []

    def columns(self):
        cols = ["case", f"ours {self.unit}", f"{self.baseline} {self.unit} (same run)",
                f"{self.baseline} / ours", f"ours {self.rate_unit}",
                f"of {self.ceiling}" if self.ceiling else "of ceiling"]
        if self.anchor:
            cols.append(f"{self.anchor} {self.unit} (anchor, other run)")
        return cols + ["command"]

    def header_lines(self):
        cols = self.columns()
        return ["| " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 2) + "---|"]

    def line(self, row):
        cells = [row.case, fmt_time(row.ours), fmt_time(row.baseline), fmt_ratio(row.ratio),
                 "-" if row.rate is None else f"{row.rate:.0f}" if row.rate >= 10
                 else f"{row.rate:.2f}", fmt_ratio(row.fraction)]
        if self.anchor:
            cells.append(fmt_time(row.anchor))
        cells.append(f"`{row.command}`" if row.command else "")
        return "| " + " | ".join(cells) + " |"

    def start(self):
        print(f"\n### {self.title}\n", flush=True)
        if self.notes:
            print(self.notes + "\n")
        print("\n".join(self.header_lines()), flush=True)

    def add(self, row):
        self.rows.append(row)
        print(self.line(row), flush=True)


def git_hash():
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return head + ("+local changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device):
    """One line: the GPU (or CPU), its software, and the host CPU."""
    import numpy

    host = f"{cpu_name()}, {os.cpu_count()} CPUs visible, NumPy {numpy.__version__}"
    if os.environ.get("OMP_NUM_THREADS"):  # the threads of the CPU backend and of NumPy's BLAS
        host += f", OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
    if device != "cuda":
        return host
    import torch

    props = torch.cuda.get_device_properties(0)
    return (f"{props.name} ({props.multi_processor_count} SMs, {props.total_memory >> 30} GiB), "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}; host {host}")


def build(fi):
    info = fi.build_info()
    cuda = f"CUDA {info.get('cuda_archs') or 'on'}" if info.get("cuda") else "CPU only"
    return f"flashindexer {info.get('version')} at {git_hash()} ({cuda}, {info.get('compiler')})"


HEADLINE_COLUMNS = ["op", "case", "ours", "same-run peer", "peer / ours", "of same-run ceiling",
                    "anchor (other run)"]


def headline_line(table, row):
    anchor = "-"
    if table.anchor and row.anchor is not None:
        anchor = f"{table.anchor} {fmt_time(row.anchor)} {table.unit}"
    peer = "-"
    if row.baseline is not None:
        peer = f"{table.baseline} {fmt_time(row.baseline)} {table.unit}"
    fraction = "-" if row.fraction is None else f"{row.fraction:.2f} of {table.ceiling}"
    return (f"| {row.headline} | {row.case} | {fmt_time(row.ours)} {table.unit} | {peer} "
            f"| {fmt_ratio(row.ratio)} | {fraction} | {anchor} |")


def write_markdown(path, tables, argv, device, fi, ceilings_text, gpu_note):
    """docs/benchmarks.md: headline, then every table with its command, machine and build."""
    command = "python -m bench " + " ".join(argv)
    if os.environ.get("OMP_NUM_THREADS"):
        command = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} {command}"
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["# FlashIndexer benchmarks", "",
           f"Written by `{command}` on {when}: {machine(device)}; build {build(fi)}.",
           "Every ratio is against a peer or a ceiling measured in the same run; the anchor "
           "columns quote other projects' kernels measured in another run "
           "(`bench/cases.py`), never this one. Method and how to read a row: "
           "`bench/README.md`; the older dated measurements: `docs/history/`."]
    if gpu_note:
        out += ["", gpu_note]
    out += ["", "## Headline", "", "| " + " | ".join(HEADLINE_COLUMNS) + " |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for table in tables:
        out += [headline_line(table, row) for row in table.rows if row.headline]
    out += ["", f"Same-run ceilings: {'; '.join(ceilings_text)}." if ceilings_text else ""]
    for table in tables:
        out += ["", f"## {table.title}", "",
                f"`{table.command}` on {machine(device)}; build {build(fi)}."]
        if table.notes:
            out += ["", table.notes]
        out += [""] + table.header_lines() + [table.line(row) for row in table.rows]
    with open(path, "w") as f:
        f.write("\n".join(out).rstrip() + "\n")
    print(f"\nwrote {path} ({len(out)} lines)", file=sys.stderr)
