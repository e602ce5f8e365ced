# SPDX-License-Identifier: Apache-2.0
"""Checks the records `flashindexer bench --json FILE` writes (the bench issue's fields).

    python3 tests/tools/check_bench_json.py FLASHINDEXER_BINARY OUTPUT_JSON
"""
import json
import subprocess
import sys

REQUIRED = {"name": str, "device": str, "op": str, "median_ms": float, "work": (int, float),
            "fraction_of_ceiling": float, "baseline": str}


def main():
    binary, path = sys.argv[1], sys.argv[2]
    subprocess.run([binary, "bench", "--preset", "quick", "--only", "topk 32x16384 f32 k=512",
                    "--baseline", "none", "--repeats", "1", "--json", path], check=True,
                   stdout=subprocess.DEVNULL)
    with open(path) as f:
        records = json.load(f)
    assert len(records) == 1, records
    record = records[0]
    for key, kind in REQUIRED.items():
        assert isinstance(record.get(key), kind), f"{key}: {record.get(key)!r}"
    assert "baseline_ms" in record, record
    assert record["device"] == "cpu" and record["op"] == "topk_per_row", record
    assert record["median_ms"] > 0 and record["work"] == 32 * 16384 * 4, record
    assert 0 < record["fraction_of_ceiling"] < 10, record
    assert record["baseline"] == "none" and record["baseline_ms"] is None, record
    # Comma-separated --only: every case that contains one of the parts, and no other.
    subprocess.run([binary, "bench", "--preset", "quick", "--only", "k=512,no such case",
                    "--baseline", "none", "--repeats", "1", "--json", path], check=True,
                   stdout=subprocess.DEVNULL)
    with open(path) as f:
        names = sorted({r["name"] for r in json.load(f)})
    assert names == sorted(["prefill 32x4096 H=64 k=512", "prefill 32x4096 H=32 k=512",
                            "decode 4x8192 H=64 k=512", "decode 4x8192 H=32 k=512",
                            "topk 32x16384 f32 k=512"]), names
    print("bench JSON ok:", record)


if __name__ == "__main__":
    main()
