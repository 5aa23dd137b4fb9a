"""TPC-H's 22 queries through ``db.sql`` beside DuckDB reading the Parquet files directly.

The 8 tables are generated with ``tpchgen-cli`` and loaded into a mere
database on the local file system (``lineitem`` and ``orders`` partitioned,
as in the tests). Three columns, each the median of ``--runs`` runs after
one warm-up, runs interleaved:

* DuckDB reading tpchgen-cli's Parquet files (``read_parquet``);
* DuckDB reading mere's live data files of the same version directly
  (``read_parquet`` of the files, partition values from the paths): the same
  bytes ``db.sql`` reads, so the ratio of the last two columns is the cost of
  the SQL layer itself;
* ``db.sql``: everything it does per query (finding the latest version,
  making each table the query names a view of its live files, DuckDB running
  the query over them).

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

import duckdb

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


def timed_together(fns: dict[str, Callable[[], Any]], runs: int) -> dict[str, float]:
    """The median time of each function, runs interleaved, after one warm-up each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(runs):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {k: median(v) for k, v in times.items()}


def same_files(db: mere.Database, root: Path) -> duckdb.DuckDBPyConnection:
    """DuckDB reading the live data files of ``db``'s latest version directly."""
    con = duckdb.connect()
    snap = db.snapshot()
    for name in tpch.TABLES:
        table = snap.table(name)
        files = [str(root / "tables" / table.id / f.path) for f in table.files]
        con.execute(
            f"CREATE VIEW {name} AS SELECT * FROM read_parquet({files!r}, hive_partitioning = true)"
        )
    return con


def _row(label: str, r: dict[str, Any]) -> list[str]:
    duck, files, mine = r["duckdb_s"], r["duckdb_mere_files_s"], r["mere_s"]
    return [
        label,
        f"{duck * 1000:.1f}",
        f"{files * 1000:.1f}",
        f"{mine * 1000:.1f}",
        f"{mine / duck:.2f}",
        f"{mine / files:.2f}",
    ]


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
        same = same_files(db, work / "db")
        rows = []
        results = []
        for number, query in sorted(tpch.QUERIES.items()):
            fns = {
                "duckdb_s": lambda q=query: duck.sql(q).to_arrow_table(),
                "duckdb_mere_files_s": lambda q=query: same.sql(q).to_arrow_table(),
                "mere_s": lambda q=query: db.sql(q),
            }
            result: dict[str, Any] = {"query": number, **timed_together(fns, args.runs)}
            results.append(result)
            rows.append(_row(f"Q{number}", result))
        totals = {
            k: sum(r[k] for r in results) for k in ("duckdb_s", "duckdb_mere_files_s", "mere_s")
        }
        rows.append(_row("total", totals))
        headers = [
            "query",
            "DuckDB, tpchgen files (ms)",
            "DuckDB, mere's files (ms)",
            "db.sql (ms)",
            "db.sql / tpchgen",
            "db.sql / mere's files",
        ]
        print(format_table(headers, rows))
        write_results(
            "tpch_sql",
            {"scale_factor": args.scale_factor, "runs": args.runs, "queries": results},
            args.json,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
