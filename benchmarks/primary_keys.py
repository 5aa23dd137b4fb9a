"""What a primary key costs: appending new random keys, and upserts against MERGE.

Side by side in one run, on a LocalStore table of ``--rows`` rows in
``--files`` files (the even keys 0..2*rows-2 shuffled across files; new keys
are random odd numbers in the same range, so statistics cannot prune):

* ``append``: 1,000 rows of new random keys into the table without a key;
* ``append, keyed``: the same into the same table with ``primary_key=["id"]``
  (mere reads the key column of every file whose statistics and key filter
  admit a new key; the process keeps the filters it has read, as a long-lived
  writer does);
* ``append, keyed, cold``: the same after forgetting the cached filters, as a
  fresh process (it reads every file's filter sidecar);
* ``first keyed append``: the first one after loading the table, which reads
  every file's key column and writes its filter (once per file, ever);
* ``upsert``: ``append(on_duplicate="update")`` of 1,000 rows, half new;
* ``merge``: the equivalent ``merge(...).when_matched_update_all().when_not_matched_insert_all()``.

Each step runs ``--repeat`` times (alternating keyed and plain); medians are
reported with the ratio keyed / plain, and written as JSON to ``--output``
(for benchmarks/compare_versions.py).

    .venv/bin/python benchmarks/primary_keys.py --rows 1000000 --files 100
    .venv/bin/python benchmarks/primary_keys.py --rows 10000000 --files 100
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import mere

SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("v", pa.float64())])


def build(root: Path, rows: int, files: int, keyed: bool) -> mere.Database:
    db = mere.connect(root)
    db.create_table("t", SCHEMA, primary_key=["id"] if keyed else None)
    keys = 2 * np.random.default_rng(1).permutation(rows)  # even: the odd keys are new
    per = rows // files
    with db.transaction() as tx:
        table = tx.table("t")
        for i in range(files):
            part = keys[i * per : (i + 1) * per]
            tx.stage.write_rows(
                table.table_id,
                pa.table({"id": part, "v": np.zeros(len(part))}, schema=table.schema),
            )
            tx.stage._flush(table.table_id)  # one file per slice (benchmark setup only)
    return db


#: Per step, the CPU seconds of this process (all threads) beside the wall time:
#: less sensitive to a busy machine than the wall clock.
CPU: dict[str, list[float]] = {}


def timed(action: object, name: str = "") -> float:
    assert callable(action)
    start, cpu = time.perf_counter(), time.process_time()
    action()
    if name:
        CPU.setdefault(name, []).append(time.process_time() - cpu)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--output", help="also write the medians here as JSON")
    parser.add_argument(
        "--no-upserts", action="store_true", help="only the appends (upserts rewrite the table)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        plain = build(Path(tmp) / "plain", args.rows, args.files, keyed=False)
        keyed = build(Path(tmp) / "keyed", args.rows, args.files, keyed=True)
        rng = np.random.default_rng(2)
        fresh_keys = iter(2 * rng.permutation(args.rows) + 1)  # odd keys in random order
        times: dict[str, list[float]] = {
            "append": [],
            "append, keyed": [],
            "append, keyed, cold": [],
            "first keyed append": [],
            "upsert": [],
            "merge": [],
        }

        def fresh(n: int) -> np.ndarray:
            return np.fromiter(fresh_keys, np.int64, count=n)

        def new_batch() -> pa.Table:
            return pa.table({"id": fresh(args.batch), "v": np.ones(args.batch)}, schema=SCHEMA)

        first = new_batch()
        times["first keyed append"].append(
            timed(lambda: keyed.table("t").append(first), "first keyed append")
        )
        plain.table("t").append(new_batch())
        for _ in range(args.repeat):  # appends of new keys: plain, keyed, keyed in a new process
            for name, db in (("append", plain), ("append, keyed", keyed)):
                batch = new_batch()
                times[name].append(timed(lambda db=db, b=batch: db.table("t").append(b), name))
            forget_filters()
            cold = new_batch()
            times["append, keyed, cold"].append(
                timed(lambda b=cold: keyed.table("t").append(b), "append, keyed, cold")
            )
        for _ in range(0 if args.no_upserts else args.repeat):  # upserts, half new, vs merge
            old = 2 * rng.choice(args.rows, args.batch // 2, replace=False)
            new = fresh(args.batch - args.batch // 2)
            ids = np.concatenate([old, new])
            batch = pa.table({"id": ids, "v": np.full(len(ids), 2.0)}, schema=SCHEMA)
            times["upsert"].append(
                timed(lambda b=batch: keyed.table("t").append(b, on_duplicate="update"), "upsert")
            )
            ids2 = np.concatenate([old, new])  # new to the plain table too
            batch2 = pa.table({"id": ids2, "v": np.full(len(ids2), 3.0)}, schema=SCHEMA)
            times["merge"].append(
                timed(
                    lambda b=batch2: (
                        plain.table("t")
                        .merge(b, "t.id = s.id")
                        .when_matched_update_all()
                        .when_not_matched_insert_all()
                        .execute()
                    ),
                    "merge",
                )
            )
        med = {k: statistics.median(v) for k, v in times.items() if v}
        cpu = {k: statistics.median(v) for k, v in CPU.items()}
        print(f"rows={args.rows:,} files={args.files} batch={args.batch} repeat={args.repeat}")
        for name, value in med.items():
            print(f"  {name:22s} {value * 1000:9.1f} ms  (CPU {cpu[name] * 1000:9.1f} ms)")
        maybe: dict[str, float | None] = {
            "keyed / plain append": med["append, keyed"] / med["append"],
            "keyed cold / plain append": med["append, keyed, cold"] / med["append"],
            "upsert / merge": med["upsert"] / med["merge"] if "upsert" in med else None,
            "keyed / plain append, CPU": cpu["append, keyed"] / cpu["append"],
            "keyed cold / plain append, CPU": cpu["append, keyed, cold"] / cpu["append"],
            "upsert / merge, CPU": cpu["upsert"] / cpu["merge"] if "upsert" in cpu else None,
        }
        ratios = {k: v for k, v in maybe.items() if v is not None}
        for name, value in ratios.items():
            print(f"  {name:26s} {value:.2f}x")
        if args.output:
            report = {
                "parameters": vars(args),
                "results": [
                    {"name": k, "ms": v * 1000, "cpu_ms": cpu[k] * 1000} for k, v in med.items()
                ],
                "ratios": [{"name": k, "ratio": v} for k, v in ratios.items()],
            }
            Path(args.output).write_text(json.dumps(report, indent=2))


def forget_filters() -> None:
    """Drop the key filters this process holds (a fresh process); no-op before they existed."""
    try:
        from mere.data import keyfilter
    except ImportError:
        return
    keyfilter.CACHE.clear()


if __name__ == "__main__":
    main()
