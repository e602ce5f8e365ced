#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Are two builds' kernels the same machine code? (the renovation's proof of neutrality)

Compares `cuobjdump -sass` of two libraries (or object files, or saved dumps) kernel by kernel,
whatever the kernels are called now: a kernel moved to another namespace or renamed by a new
template parameter still matches when its instructions do. Each kernel of BEFORE is put in one
class:

  identical        the same instruction sequence (addresses and encodings aside);
  same-but-params  the same sequence once kernel-parameter offsets (c[0x0][...]) are ignored:
                   the parameter struct's layout changed, nothing else;
  differs          no kernel of AFTER has its instructions: timed before and after on the GPU.

usage: sass_compare.py BEFORE AFTER     (a .a/.o/.cubin file, or a text file of cuobjdump -sass)
Exit status 0 when every kernel is identical or same-but-params, 1 otherwise.
"""
import collections
import os
import re
import shutil
import subprocess
import sys

PARAM_OFFSET = re.compile(r"c\[0x0\]\[0x[0-9a-f]+\]")


def sass_text(path):
    if path.endswith((".sass", ".txt")):
        with open(path) as handle:
            return handle.read()
    cuobjdump = os.environ.get("CUOBJDUMP") or shutil.which("cuobjdump")
    if not cuobjdump:
        sys.exit("cuobjdump not found: set CUOBJDUMP or put it on PATH (pip nvidia-cuda-cuobjdump)")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(cuobjdump) + os.pathsep + env.get("PATH", "")
    result = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(f"cuobjdump -sass {path} failed: {result.stderr.strip()}")
    return result.stdout


def kernels(text):
    """[(mangled name, tuple of instructions)], instructions without addresses or encodings."""
    found = []
    name, body = None, []
    for line in text.splitlines():
        match = re.search(r"Function : (\S+)", line)
        if match:
            if name is not None:
                found.append((name, tuple(body)))
            name, body = match.group(1), []
            continue
        match = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*(/\* 0x[0-9a-f]+ \*/)?\s*$", line)
        if name is not None and match:
            body.append(match.group(1))
    if name is not None:
        found.append((name, tuple(body)))
    return found


def demangle(names):
    filt = shutil.which("c++filt")
    if not filt:
        return {name: name for name in names}
    out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def pair_off(before, after, key):
    """Matches kernels of before with kernels of after whose key(body) is equal (a multiset)."""
    pool = collections.defaultdict(list)
    for name, body in after:
        pool[key(body)].append((name, body))
    matched, unmatched = [], []
    for name, body in before:
        bucket = pool.get(key(body))
        if bucket:
            matched.append((name, bucket.pop(0)[0]))
        else:
            unmatched.append((name, body))
    rest = [item for bucket in pool.values() for item in bucket]
    return matched, unmatched, rest


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    before, after = kernels(sass_text(argv[1])), kernels(sass_text(argv[2]))
    names = demangle([name for name, _ in before + after])
    identical, before_left, after_left = pair_off(before, after, lambda body: body)
    params_only, before_left, after_left = pair_off(
        before_left, after_left, lambda body: tuple(PARAM_OFFSET.sub("c[0x0][P]", i) for i in body))
    short = lambda name: names[name][:160]
    print(f"before: {len(before)} kernels, after: {len(after)} kernels")
    print(f"identical: {len(identical)}")
    for old, new in identical:
        print(f"  = {short(old)}" + ("" if old == new else f"\n      now {short(new)}"))
    print(f"same-but-params: {len(params_only)}")
    for old, new in params_only:
        print(f"  ~ {short(old)}" + ("" if old == new else f"\n      now {short(new)}"))
    print(f"differs: {len(before_left)} before, {len(after_left)} after without a match")
    for name, body in before_left:
        print(f"  - {short(name)} ({len(body)} instructions)")
    for name, body in after_left:
        print(f"  + {short(name)} ({len(body)} instructions)")
    return 0 if not before_left and not after_left else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
