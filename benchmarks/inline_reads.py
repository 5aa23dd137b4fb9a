"""Reading a table of many inlined one-row files, beside the same rows in one stored file.

Inlined small commits (docs/format.md §2.5) leave a table with up to
``inlineFlushBytes`` (8 MiB by default, several thousand one-row files) of
Parquet files inside its log until a checkpoint flushes them. Every read of
the table decodes them. Measured side by side in one run, on a LocalStore:

* ``inlined``: ``--files`` one-row appends into a database with inlining on;
* ``one stored file``: the same rows appended at once, without inlining.

First one scan of each, the first read in the process (for the inlined
table, that decodes every file); then a full ``scan()``, a filtered
``scan()`` and two SQL queries, ``--rounds`` times each (median), and a
compaction of the inlined table at the end (the flush's work), timed once.

    .venv/bin/python benchmarks/inline_reads.py --files 3000 --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import _common as c
import mere
from commit_latency import make_row

QUERIES: dict[str, Callable[[mere.Database], Any]] = {
    "scan": lambda db: db.table("t").scan(),
    "scan id = 5": lambda db: db.table("t").scan(filter="id = 5"),
    "sql count, sum": lambda db: db.sql("SELECT count(*), sum(amount) FROM t"),
    "sql group by country": lambda db: db.sql(
        "SELECT country, count(*) AS n FROM t GROUP BY country ORDER BY country"
    ),
}


def build(path: Path, files: int, inline: bool) -> mere.Database:
    db = mere.connect(
        str(path), checkpoint_interval=1_000_000, inline_limit=65536 if inline else None
    )
    db.create_table("t", c.BASELINE_SCHEMA)
    if inline:
        progress = c.Progress("inlined appends", files)
        for i in range(files):
            db.table("t").append([make_row(i)])
            progress.update(i + 1)
    else:
        rows = pa.Table.from_pylist([make_row(i) for i in range(files)], c.BASELINE_SCHEMA)
        db.table("t").append(rows)
    return db


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=3000, help="one-row inlined files")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workdir", default="/tmp/mere-bench/inline_reads")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args()
    c.print_machine()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    tables = {
        "inlined": build(workdir / "inlined", args.files, inline=True),
        "one stored file": build(workdir / "stored", args.files, inline=False),
    }
    for name, db in tables.items():
        files = db.snapshot().table("t").files
        assert len(files) == (args.files if name == "inlined" else 1), name
    # The first read of the inlined table in this process decodes every file.
    cold = {name: timed(lambda d=db: d.table("t").scan()) for name, db in tables.items()}
    results: dict[str, dict[str, float]] = {n: {} for n in tables}
    for query, run in QUERIES.items():
        answers = {name: run(db) for name, db in tables.items()}
        inlined, stored = answers["inlined"], answers["one stored file"]
        key = inlined.column_names[0]
        assert inlined.sort_by(key).equals(stored.sort_by(key)), query
        for name, db in tables.items():
            times = [timed(lambda d=db, r=run: r(d)) for _ in range(args.rounds)]
            results[name][query] = c.median(times)
    compact_seconds = timed(lambda: tables["inlined"].table("t").compact())

    rows = []
    for query in QUERIES:
        warm, stored = results["inlined"][query], results["one stored file"][query]
        rows.append([query, c.ms(warm), c.ms(stored), f"{warm / stored:.1f}x"])
    print()
    print(f"{args.files:,} one-row inlined files against the same rows in one stored file")
    print(
        f"first scan in the process: inlined {c.ms(cold['inlined']):.0f} ms (decodes them all), "
        f"stored {c.ms(cold['one stored file']):.1f} ms"
    )
    print(f"then, median of {args.rounds} (ms):")
    print(c.format_table(["query", "inlined", "stored", "inlined / stored"], rows))
    print(f"\ncompaction of the inlined table (the flush's work): {c.ms(compact_seconds):.0f} ms")
    payload = {
        "benchmark": "inline_reads",
        "machine": c.machine_info(),
        "parameters": vars(args),
        "cold_scan_ms": {name: c.ms(t) for name, t in cold.items()},
        "series": [
            {
                "name": query,
                "inlined_ms": c.ms(results["inlined"][query]),
                "stored_ms": c.ms(results["one stored file"][query]),
            }
            for query in QUERIES
        ],
        "compact_ms": c.ms(compact_seconds),
    }
    print(f"\nresults: {c.write_results('inline_reads', payload, args.output)}")


if __name__ == "__main__":
    sys.exit(main())
