"""Reading a mere table with Spark: Spark's Parquet reader vs the data source vs the native read.

One table of ``--rows`` rows (default 10M) in the baseline schema (id,
customer_id, amount, ts, country, note) is written once with mere (reused
from ``--workdir`` when present). Then, in one Spark session (``local[2]``
unless ``--master``), each workload runs ``--repeats`` times (after one
untimed warm-up) on three readers of the same files:

* ``parquet``: ``spark.read.parquet(<the table's files>)`` -- the floor;
* ``datasource``: ``spark.read.format("mere")`` (the Python data source);
* ``native``: ``mere.spark.read(spark, uri, table)`` (the snapshot's files
  handed to Spark's Parquet reader).

Workloads: ``count()``; ``sum(amount) group by country``; ``select id``
then ``count()``; and a full scan of every column into Spark's ``noop``
sink. Medians are printed with their ratio to ``parquet`` and written to
``benchmarks/results/spark_read.json``.

With ``--write``, the same rows generated in Spark are also written three
ways: ``df.write.parquet`` (the floor), ``df.write.format("mere")`` (the data
source: executors write, one commit) and ``mere.spark.write`` inside a
transaction (by default Spark's own Parquet writer, one commit).

    .venv/bin/python benchmarks/spark_read.py --rows 10000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

import _common as c
import mere

TABLE = "orders"
CHUNK_ROWS = 1_000_000
COUNTRIES = ["FR", "DE", "IT", "ES", "NL", "BE", "PL", "SE", "US", "JP"]


def chunk(start: int, rows: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    base = 1_700_000_000_000_000
    notes = np.char.add("note-", rng.integers(0, 1_000_000, rows).astype(str))
    return pa.table(
        {
            "id": ids,
            "customer_id": rng.integers(0, 100_000, rows, dtype=np.int64),
            "amount": np.round(rng.random(rows) * 1000, 2),
            "ts": pa.array(base + ids * 1000, pa.timestamp("us", tz="UTC")),
            "country": pa.array(np.array(COUNTRIES)[rng.integers(0, len(COUNTRIES), rows)]),
            "note": pa.array(notes),
        },
        schema=c.BASELINE_SCHEMA,
    )


def build(uri: str, rows: int) -> mere.Database:
    db = mere.connect(uri)
    if TABLE in db.tables() and db.snapshot().table(TABLE).describe()["rows"] == rows:
        return db
    print(f"writing {rows:,} rows to {uri}", flush=True)
    rng = np.random.default_rng(42)
    t0 = time.perf_counter()
    with db.transaction() as tx:
        tx.drop_table(TABLE, if_exists=True)
        tx.create_table(TABLE, c.BASELINE_SCHEMA)
        for start in range(0, rows, CHUNK_ROWS):
            tx.table(TABLE).append(chunk(start, min(CHUNK_ROWS, rows - start), rng))
    print(f"  written in {time.perf_counter() - t0:.1f} s", flush=True)
    return db


def session(master: str, memory: str) -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master(master)
        .appName("mere-spark-read")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", memory)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def workloads() -> dict[str, Callable[[Any], Any]]:
    from pyspark.sql import functions as F

    return {
        "count()": lambda df: df.count(),
        "sum(amount) group by country": lambda df: (
            df.groupBy("country").agg(F.sum("amount")).collect()
        ),
        "select id, count()": lambda df: df.select("id").count(),
        "full scan, all columns (noop sink)": lambda df: (
            df.write.format("noop").mode("overwrite").save()
        ),
    }


def spark_rows(spark: Any, rows: int) -> Any:
    """The baseline schema's rows generated in Spark (no Python on the way)."""
    from pyspark.sql import functions as F

    countries = F.array(*[F.lit(x) for x in COUNTRIES])
    return spark.range(0, rows, 1, 2).select(
        F.col("id"),
        (F.rand(1) * 100_000).cast("long").alias("customer_id"),
        F.round(F.rand(2) * 1000, 2).alias("amount"),
        F.timestamp_micros(F.lit(1_700_000_000_000_000) + F.col("id") * 1000).alias("ts"),
        F.element_at(countries, (F.col("id") % len(COUNTRIES) + 1).cast("int")).alias("country"),
        F.concat(F.lit("note-"), (F.rand(3) * 1_000_000).cast("long").cast("string")).alias("note"),
    )


def write_benchmark(spark: Any, workdir: Path, rows: int, repeats: int) -> list[dict[str, Any]]:
    """Median seconds of writing ``rows`` rows: plain Parquet, the data source, a transaction."""
    import shutil

    import mere.spark

    df = spark_rows(spark, rows)
    target = workdir / "write"
    counter = iter(range(1_000_000))

    def fresh() -> str:
        shutil.rmtree(target, ignore_errors=True)
        return str(target / f"run-{next(counter)}")

    def parquet() -> None:
        df.write.mode("overwrite").parquet(fresh())

    def datasource() -> None:
        uri = fresh()
        mere.connect(uri).create_table(TABLE, c.BASELINE_SCHEMA)
        df.write.format("mere").option("database", uri).mode("append").save(TABLE)

    def transaction() -> None:
        uri = fresh()
        mere.connect(uri).create_table(TABLE, c.BASELINE_SCHEMA)
        with mere.connect(uri).transaction() as tx:
            mere.spark.write(tx, df, TABLE)

    results = []
    for name, run in (("parquet", parquet), ("datasource", datasource), ("write(tx)", transaction)):
        times = timed(run, repeats)
        results.append({"writer": name, "seconds": times})
        print(f"  write {name:<12} {c.median(times):.2f} s", flush=True)
    shutil.rmtree(target, ignore_errors=True)
    return results


def timed(run: Callable[[], Any], repeats: int) -> list[float]:
    run()  # warm-up: JIT, Python workers, file cache
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return times


def arguments(description: str, rows: int) -> argparse.ArgumentParser:
    """The options every Spark read benchmark takes (``--rows`` defaulting to ``rows``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, default=rows)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    return parser


class Prepared(NamedTuple):
    """A Spark read benchmark's table and session (see :func:`prepare`)."""

    uri: str
    workdir: Path
    spark: Any
    paths: list[str]  # the table's data files, as Spark reads them
    size: int  # their bytes


def prepare(args: argparse.Namespace) -> Prepared:
    """The table built (or reused) and a session with the data source registered."""
    import mere.spark
    from mere.spark._native import table_location

    c.print_machine()
    workdir = args.workdir or Path(tempfile.gettempdir()) / "mere-bench-spark-read"
    uri = str(workdir / f"db-{args.rows}")
    db = build(uri, args.rows)
    snapshot = db.snapshot().table(TABLE)
    size = sum(f.size for f in snapshot.files)
    print(f"{len(snapshot.files)} files, {size / 2**20:.0f} MiB", flush=True)
    spark = session(args.master, args.driver_memory)
    mere.spark.register(spark)
    location = table_location(db.store, mere.spark._core.table_meta(snapshot))
    paths = [f"{location}/{f.path}" for f in snapshot.files]
    return Prepared(uri, workdir, spark, paths, size)


def main() -> None:
    parser = arguments(__doc__.split("\n")[0], rows=10_000_000)
    parser.add_argument("--write", action="store_true", help="also time writes")
    parser.add_argument("--out", default=None, help="results JSON path")
    args = parser.parse_args()
    uri, workdir, spark, paths, size = prepare(args)

    import mere.spark

    readers: dict[str, Callable[[], Any]] = {
        "parquet": lambda: spark.read.parquet(*paths),
        "datasource": lambda: spark.read.format("mere").option("database", uri).load(TABLE),
        "native": lambda: mere.spark.read(spark, uri, TABLE),
    }
    results: list[dict[str, Any]] = []
    rows_out = []
    for workload, run in workloads().items():
        medians: dict[str, float] = {}
        for reader, make in readers.items():
            times = timed(lambda make=make, run=run: run(make()), args.repeats)
            medians[reader] = c.median(times)
            results.append({"workload": workload, "reader": reader, "seconds": times})
            print(f"  {workload:<36} {reader:<10} {medians[reader]:.2f} s", flush=True)
        base = medians["parquet"]
        rows_out.append(
            [
                workload,
                medians["parquet"],
                medians["datasource"],
                medians["native"],
                f"{medians['datasource'] / base:.2f}x",
                f"{medians['native'] / base:.2f}x",
            ]
        )
    writes = write_benchmark(spark, workdir, args.rows, args.repeats) if args.write else []
    spark.stop()
    print()
    print(f"{args.rows:,} rows, median of {args.repeats} (seconds); ratios to spark.read.parquet")
    print(
        c.format_table(
            ["workload", "parquet", "datasource", "native", "ds/parquet", "native/parquet"],
            rows_out,
        )
    )
    if writes:
        base = c.median(writes[0]["seconds"])
        print(
            f"\nwriting {args.rows:,} rows generated in Spark, median of {args.repeats} (seconds)"
        )
        print(
            c.format_table(
                ["writer", "seconds", "ratio"],
                [
                    [w["writer"], c.median(w["seconds"]), f"{c.median(w['seconds']) / base:.2f}x"]
                    for w in writes
                ],
            )
        )
    out = c.write_results(
        "spark_read",
        {
            "rows": args.rows,
            "files": len(paths),
            "bytes": size,
            "results": results,
            "writes": writes,
        },
        args.out,
    )
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
