"""A bulk append and a full scan of mere beside pyarrow on the same table, alternating.

Issue 17's two bulk figures, each a ratio measured in one run: mere's append
of the throughput table (``throughput.generate``, 4M rows by default; zstd,
one transaction into a fresh database) against ``pq.write_table`` with
snappy (pyarrow's default, what a user compares with), and mere's full
``scan()`` against ``pq.read_table`` of a single-file zstd copy of the same
rows. Each repetition runs both sides, and the side that goes first
alternates from one repetition to the next, so neither profits from a warm
cache or a machine getting quieter. Wall and CPU time (all threads) are
reported; CPU over wall shows how many cores a side used.

    nice -n -10 .venv/bin/python benchmarks/bulk_io.py --rows 4000000 --reps 6
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import _common as c
import mere
from throughput import generate


def run(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--reps", type=int, default=6)
    parser.add_argument("--workdir", default="/tmp/mere-bench/bulk_io", help="scratch (wiped)")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)

    c.print_machine()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    data = generate(args.rows)
    snappy, zstd = workdir / "snappy.parquet", workdir / "zstd.parquet"
    pq.write_table(data, zstd, compression="zstd")
    databases = iter(range(10**6))

    def mere_append() -> None:
        path = workdir / f"db-{next(databases)}"
        db = mere.connect(str(path))
        db.create_table("t", c.BASELINE_SCHEMA)
        db.table("t").append(data)

    def pyarrow_write() -> None:
        pq.write_table(data, snappy, compression="snappy")

    mere_append()
    read_db = str(workdir / "db-0")

    def mere_scan() -> None:
        assert mere.connect(read_db, create=False).table("t").scan().num_rows == args.rows

    def pyarrow_read() -> None:
        assert pq.read_table(zstd).num_rows == args.rows

    pairs = {
        "write": [("pyarrow write_table snappy", pyarrow_write), ("mere append zstd", mere_append)],
        "full scan": [("pyarrow read_table zstd", pyarrow_read), ("mere scan", mere_scan)],
    }
    samples: dict[str, list[tuple[float, float]]] = {}
    for group, sides in pairs.items():
        for rep in range(args.reps):
            order = sides if rep % 2 == 0 else sides[::-1]
            for name, fn in order:
                wall, cpu = run(fn)
                samples.setdefault(f"{group}: {name}", []).append((wall, cpu))
                print(f"  {group}: {name} [{rep + 1}/{args.reps}] {wall:.3f} s (cpu {cpu:.3f})")
            for old in workdir.glob("db-*"):
                if str(old) != read_db:
                    shutil.rmtree(old, ignore_errors=True)

    results: dict[str, Any] = {}
    for key, values in samples.items():
        results[key] = {
            "median_s": c.median([w for w, _ in values]),
            "cpu_median_s": c.median([u for _, u in values]),
        }
    ratios = {
        "write mere / pyarrow": results["write: mere append zstd"]["median_s"]
        / results["write: pyarrow write_table snappy"]["median_s"],
        "scan mere / pyarrow": results["full scan: mere scan"]["median_s"]
        / results["full scan: pyarrow read_table zstd"]["median_s"],
    }
    files = len(mere.connect(read_db, create=False).snapshot().table("t").files)
    rows = [[k, v["median_s"], v["cpu_median_s"]] for k, v in results.items()]
    print(f"\n{args.rows:,} rows, median of {args.reps}; mere's table: {files} files")
    print(c.format_table(["what", "median s", "cpu s"], rows))
    for k, v in ratios.items():
        print(f"{k}: {v:.2f}x")
    print(f"load average at the end: {os.getloadavg()}")
    out = c.write_results(
        "bulk_io",
        {"parameters": vars(args), "results": results, "ratios": ratios, "files": files},
        args.output,
    )
    print(f"results: {out}")
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
