"""TPC-H's 22 queries through ``db.sql`` beside DuckDB reading the same Parquet files directly.

The 8 tables are generated with ``tpchgen-cli`` and loaded into a mere
database on the local file system (``lineitem`` and ``orders`` partitioned,
as in the tests). Each query runs ``--runs`` times in each engine after one
warm-up; the median is reported, and the total of the medians compared. The
mere time includes everything ``db.sql`` does per query: finding the latest
version, registering the tables the query names as datasets of their live
files, and DuckDB running it over them.

    .venv/bin/python benchmarks/tpch_sql.py --scale-factor 1 --runs 5
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mere
from _common import format_table, median, print_machine, write_results


def _queries() -> Any:
    spec = importlib.util.spec_from_file_location(
        "tpch_queries", Path(__file__).resolve().parent / "tpch_queries.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["tpch_queries"] = module
    spec.loader.exec_module(module)
    return module


tpch = _queries()


def timed(fn: Callable[[], Any], runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale-factor", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--data", type=Path, default=None, help="where to keep the Parquet files")
    parser.add_argument("--json", default=None, help="write the results to this file")
    args = parser.parse_args()
    print_machine()
    work = Path(tempfile.mkdtemp(prefix="mere-tpch-sql-"))
    data = args.data or work / f"sf{args.scale_factor}"
    try:
        start = time.perf_counter()
        tpch.tpchgen(data, args.scale_factor)
        db = mere.connect(work / "db")
        tpch.load(db, data)
        print(f"data ready in {time.perf_counter() - start:.1f} s (SF {args.scale_factor})")
        duck = tpch.duckdb_on_parquet(data)
        rows = []
        results = []
        for number, query in sorted(tpch.QUERIES.items()):
            theirs = timed(lambda q=query: duck.sql(q).to_arrow_table(), args.runs)
            mine = timed(lambda q=query: db.sql(q), args.runs)
            rows.append(
                [f"Q{number}", f"{theirs * 1000:.1f}", f"{mine * 1000:.1f}", f"{mine / theirs:.2f}"]
            )
            results.append({"query": number, "duckdb_s": theirs, "mere_s": mine})
        total_duck = sum(r["duckdb_s"] for r in results)
        total_mere = sum(r["mere_s"] for r in results)
        rows.append(
            [
                "total",
                f"{total_duck * 1000:.1f}",
                f"{total_mere * 1000:.1f}",
                f"{total_mere / total_duck:.2f}",
            ]
        )
        print(format_table(["query", "DuckDB on Parquet (ms)", "mere db.sql (ms)", "ratio"], rows))
        write_results(
            "tpch_sql",
            {"scale_factor": args.scale_factor, "runs": args.runs, "queries": results},
            args.json,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
