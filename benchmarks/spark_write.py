"""Writing with Spark: ``df.write.parquet`` vs the mere data source vs ``mere.spark.write``.

``mere.spark.write`` runs twice: ``native`` (Spark's Parquet writer makes the
files) and ``arrow`` (Python tasks write Arrow batches with pyarrow). The
baseline is ``df.write.parquet`` with Spark's defaults (snappy);
``parquet zstd`` is the same with mere's compression, zstd.

Two workloads, each in one Spark session (``local[2]`` unless ``--master``):

* ``rows``: ``--rows`` rows (default 10M) of the baseline schema generated in
  Spark (``spark_read.spark_rows``, 2 partitions);
* ``tpch``: the 8 TPC-H tables read from ``--tpch`` (Parquet files named
  ``<table>.parquet``, e.g. from ``tpchgen-cli parquet -s 1``), all written
  into one mere transaction, against ``df.write.parquet`` per table.

The writers run interleaved (one after the other in each repeat, after one
untimed warm-up of each), so a change in the machine's load hits them all.
Besides wall time, the CPU time of the whole process tree (the JVM and
Spark's Python workers, from ``/proc``) is recorded: on a shared machine it
varies much less than wall time. ``floor`` is a ``mapInArrow`` task that
only counts the batches it receives: the cost of getting rows from the JVM
into Python, which any Python writer pays.

    .venv/bin/python benchmarks/spark_write.py --rows 10000000 --repeats 3
    .venv/bin/python benchmarks/spark_write.py --tpch /tmp/tpch-sf1 --repeats 2
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

import _common as c
from spark_read import TABLE, session, spark_rows

TPCH_TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")


def tree_cpu() -> float:
    """CPU seconds (user + system, reaped children included) of this process and its descendants."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    tree = {os.getpid()}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _) in procs.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grew = True
    return sum(procs[p][1] for p in tree if p in procs) / tick


def measure(
    writers: dict[str, Callable[[], Any]], repeats: int
) -> dict[str, dict[str, list[float]]]:
    for run in writers.values():
        run()  # warm-up: JIT, Python workers, file cache
    out: dict[str, dict[str, list[float]]] = {w: {"wall": [], "cpu": []} for w in writers}
    for _ in range(repeats):
        for name, run in writers.items():
            cpu0, t0 = tree_cpu(), time.perf_counter()
            run()
            out[name]["wall"].append(time.perf_counter() - t0)
            out[name]["cpu"].append(tree_cpu() - cpu0)
    return out


def floor(df: Any) -> None:
    def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})

    df.mapInArrow(count, "n long").collect()


def rows_writers(spark: Any, workdir: Path, rows: int) -> dict[str, Callable[[], Any]]:
    import mere.spark

    df = spark_rows(spark, rows)
    counter = iter(range(1_000_000))

    def fresh() -> str:
        shutil.rmtree(workdir, ignore_errors=True)
        return str(workdir / f"run-{next(counter)}")

    def datasource() -> None:
        uri = fresh()
        mere.connect(uri).create_table(TABLE, c.BASELINE_SCHEMA)
        df.write.format("mere").option("database", uri).mode("append").save(TABLE)

    def transaction(method: str) -> Callable[[], None]:
        def run() -> None:
            uri = fresh()
            mere.connect(uri).create_table(TABLE, c.BASELINE_SCHEMA)
            with mere.connect(uri).transaction() as tx:
                mere.spark.write(tx, df, TABLE, method=method)  # type: ignore[arg-type]

        return run

    return {
        "parquet": lambda: df.write.mode("overwrite").parquet(fresh()),
        "parquet zstd": lambda: df.write.option("compression", "zstd").parquet(fresh()),
        "floor": lambda: floor(df),
        "datasource": datasource,
        "write(tx) native": transaction("native"),
        "write(tx) arrow": transaction("arrow"),
    }


def tpch_writers(
    spark: Any, workdir: Path, data: Path, per_table: dict[str, list[float]]
) -> dict[str, Callable[[], Any]]:
    import mere.spark

    counter = iter(range(1_000_000))

    def fresh() -> Path:
        shutil.rmtree(workdir, ignore_errors=True)
        return workdir / f"run-{next(counter)}"

    def frame(table: str) -> Any:
        return spark.read.parquet(str(data / f"{table}.parquet"))

    def parquet() -> None:
        out = fresh()
        for table in TPCH_TABLES:
            t0 = time.perf_counter()
            frame(table).write.parquet(str(out / table))
            per_table.setdefault(f"parquet {table}", []).append(time.perf_counter() - t0)

    def transaction(method: str) -> Callable[[], None]:
        def run() -> None:
            db = mere.connect(str(fresh()))
            with db.transaction() as tx:
                for table in TPCH_TABLES:
                    t0 = time.perf_counter()
                    mere.spark.write(tx, frame(table), table, method=method)  # type: ignore[arg-type]
                    per_table.setdefault(f"mere {method} {table}", []).append(
                        time.perf_counter() - t0
                    )
            assert tx.commit_version == 1

        return run

    return {
        "parquet": parquet,
        "write(tx) native": transaction("native"),
        "write(tx) arrow": transaction("arrow"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--tpch", type=Path, default=None, help="TPC-H Parquet directory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--out", default=None, help="results JSON path")
    args = parser.parse_args()

    c.print_machine()
    workdir = args.workdir or Path(tempfile.gettempdir()) / "mere-bench-spark-write"
    spark = session(args.master, args.driver_memory)
    import mere.spark

    mere.spark.register(spark)
    per_table: dict[str, list[float]] = {}
    load_before = os.getloadavg()
    if args.tpch is not None:
        workload = f"TPC-H tables from {args.tpch}"
        writers = tpch_writers(spark, workdir, args.tpch, per_table)
    else:
        workload = f"{args.rows:,} rows generated in Spark"
        writers = rows_writers(spark, workdir, args.rows)
    results = measure(writers, args.repeats)
    load_after = os.getloadavg()
    spark.stop()
    shutil.rmtree(workdir, ignore_errors=True)

    base = results["parquet"]
    print(
        f"\n{workload}, median of {args.repeats} (seconds); "
        f"load average {load_before} -> {load_after}"
    )
    print(
        c.format_table(
            ["writer", "wall", "cpu", "wall / parquet", "cpu / parquet"],
            [
                [
                    name,
                    c.median(r["wall"]),
                    c.median(r["cpu"]),
                    f"{c.median(r['wall']) / c.median(base['wall']):.2f}x",
                    f"{c.median(r['cpu']) / c.median(base['cpu']):.2f}x",
                ]
                for name, r in results.items()
            ],
        )
    )
    if per_table:
        med = {k: c.median(v) for k, v in per_table.items()}
        print()
        print(
            c.format_table(
                ["table", "parquet", "native", "arrow", "native / parquet", "arrow / parquet"],
                [
                    [
                        t,
                        med[f"parquet {t}"],
                        med[f"mere native {t}"],
                        med[f"mere arrow {t}"],
                        f"{med[f'mere native {t}'] / med[f'parquet {t}']:.2f}x",
                        f"{med[f'mere arrow {t}'] / med[f'parquet {t}']:.2f}x",
                    ]
                    for t in TPCH_TABLES
                ],
            )
        )
    out = c.write_results(
        "spark_write_tpch" if args.tpch is not None else "spark_write",
        {
            "workload": workload,
            "repeats": args.repeats,
            "load_before": load_before,
            "load_after": load_after,
            "results": results,
            "per_table": per_table,
        },
        args.out,
    )
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
