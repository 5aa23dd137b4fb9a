"""Append and scan throughput of mere beside pyarrow on the same data, in one run.

The data is the baseline schema of shared/notes (id int64, customer_id int64,
amount float64, ts timestamp[us, tz=UTC], country string, note string),
generated once with numpy/pyarrow (10M rows by default). ``amount`` grows
with ``id`` (plus noise) and ``ts`` is increasing, as in append-ordered data,
so a range filter on ``amount`` can skip files/row groups by min/max;
``customer_id`` is uniform random, so a filter on it can skip nothing.

Measured, each ``--reps`` times (median reported), pyarrow first then mere:

(a) write: ``pq.write_table`` zstd, snappy, and zstd followed by ``os.fsync``
    (mere fsyncs every data file) vs ``db.table("t").append(table)`` (one
    transaction into a fresh database; mere writes zstd);
(b) full read: ``pq.read_table`` of pyarrow's zstd file, pyarrow.dataset over
    mere's own data files, vs ``db.table("t").scan()``;
(c) filtered read, ~1% of rows: ``amount > X`` (clustered: skipping works)
    and ``customer_id < Y`` (random: no skipping possible), pyarrow.dataset
    with the same filter vs ``scan(filter=...)``;
(d) one column: ``pq.read_table(columns=["amount"])`` vs ``scan(columns=["amount"])``.

    .venv/bin/python benchmarks/throughput.py --rows 10000000
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

import _common as c
import mere

COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "GB", "ES"]


def generate(rows: int, seed: int = 42) -> pa.Table:
    """The baseline table: ~60 bytes a row in Arrow memory."""
    rng = np.random.default_rng(seed)
    ids = np.arange(rows, dtype=np.int64)
    amount = np.round(ids * (1000.0 / max(rows, 1)) + rng.random(rows) * 10.0, 2)
    base_us = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    ts = base_us + ids * 1_000_000 + rng.integers(0, 1_000_000, rows)
    country_idx = pa.array(rng.integers(0, len(COUNTRIES), rows).astype(np.int32))
    id_array = pa.array(ids)
    return pa.table(
        {
            "id": id_array,
            "customer_id": pa.array(rng.integers(0, 1_000_000, rows, dtype=np.int64)),
            "amount": pa.array(amount),
            "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC")),
            "country": pa.array(COUNTRIES).take(country_idx),
            "note": pc.binary_join_element_wise("order ", pc.cast(id_array, pa.string()), ""),
        },
        schema=c.BASELINE_SCHEMA,
    )


def timed(
    fn: Callable[[], Any], reps: int, label: str
) -> tuple[tuple[list[float], list[float]], Any]:
    """Run ``fn`` ``reps`` times; (wall times, CPU times) and the last result.

    The CPU time is the process's (all threads): it is less sensitive than the
    wall time to other work on a shared machine.
    """
    times: list[float] = []
    cpu: list[float] = []
    result = None
    for i in range(reps):
        result = None
        gc.collect()
        c0 = time.process_time()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        print(f"  {label} [{i + 1}/{reps}]: {times[-1]:.3f} s (cpu {cpu[-1]:.3f} s)", flush=True)
    return (times, cpu), result


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--workdir", default="/tmp/mere-bench/throughput", help="scratch directory (wiped)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the files written")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)

    c.print_machine()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    reps = args.reps

    print(f"generating {args.rows:,} rows ...", flush=True)
    t0 = time.perf_counter()
    data = generate(args.rows)
    print(f"  {time.perf_counter() - t0:.1f} s, {data.nbytes / 2**20:,.0f} MiB in Arrow memory")
    amount_cut = float(np.quantile(data.column("amount").to_numpy(), 0.99))
    customer_cut = 10_000  # uniform on [0, 1e6): ~1%

    results: dict[str, dict[str, Any]] = {}

    def record(
        group: str, name: str, timing: tuple[list[float], list[float]], rows: int, **extra: Any
    ) -> None:
        times, cpu = timing
        med = c.median(times)
        results[f"{group}: {name}"] = {
            "group": group,
            "name": name,
            "seconds": times,
            "median_s": med,
            "rows": rows,
            "rows_per_s": args.rows / med,
            "cpu_seconds": cpu,
            "cpu_median_s": c.median(cpu),
            **extra,
        }

    # (a) writes ---------------------------------------------------------------
    print("(a) write", flush=True)
    pa_zstd = workdir / "pyarrow-zstd.parquet"
    pa_snappy = workdir / "pyarrow-snappy.parquet"

    def write_pyarrow(path: Path, compression: str, sync: bool = False) -> int:
        path.unlink(missing_ok=True)
        pq.write_table(data, path, compression=compression)
        if sync:
            fsync_file(path)
        return path.stat().st_size

    for name, path, comp, sync in [
        ("pyarrow write_table zstd", pa_zstd, "zstd", False),
        ("pyarrow write_table snappy", pa_snappy, "snappy", False),
        ("pyarrow write_table zstd + fsync", pa_zstd, "zstd", True),
    ]:
        times, size = timed(lambda p=path, k=comp, s=sync: write_pyarrow(p, k, s), reps, name)
        record("write", name, times, args.rows, bytes=size)

    db_dirs: list[Path] = []

    def write_mere() -> int:
        path = workdir / f"mere-{len(db_dirs)}"
        if db_dirs:  # keep only the newest database: it is the one read below
            shutil.rmtree(db_dirs[-1], ignore_errors=True)
        db_dirs.append(path)
        db = mere.connect(str(path))
        db.create_table("t", c.BASELINE_SCHEMA)
        db.table("t").append(data)
        return db.version

    times, _ = timed(write_mere, reps, "mere append (one transaction)")
    mere_path = str(db_dirs[-1])
    snap = mere.connect(mere_path).snapshot().table("t")
    mere_files = [
        str(Path(mere_path) / "tables" / snap.id / f.path) for f in snap.files
    ]  # the table prefix is tables/<id>/ on the local store
    assert all(os.path.exists(p) for p in mere_files), "unexpected data file layout"
    record(
        "write",
        "mere append (one transaction)",
        times,
        args.rows,
        bytes=dir_size(Path(mere_path)),
        files=len(mere_files),
    )

    # (b) full reads -------------------------------------------------------------
    print("(b) full read", flush=True)

    def read_mere(columns: list[str] | None = None, filter: str | None = None) -> pa.Table:
        return mere.connect(mere_path, create=False).table("t").scan(columns, filter)

    mere_ds = ds.dataset(mere_files, format="parquet")
    cases_b: list[tuple[str, Callable[[], pa.Table]]] = [
        ("pyarrow read_table (zstd file)", lambda: pq.read_table(pa_zstd)),
        ("pyarrow read_table (snappy file)", lambda: pq.read_table(pa_snappy)),
        ("pyarrow.dataset over mere's files", lambda: mere_ds.to_table()),
        ("mere scan()", lambda: read_mere()),
    ]
    for name, fn in cases_b:
        times, out = timed(fn, reps, name)
        assert out.num_rows == args.rows, (name, out.num_rows)
        record("full read", name, times, out.num_rows)
        del out

    # (c) filtered reads ------------------------------------------------------------
    print("(c) filtered read", flush=True)
    pa_ds = ds.dataset(pa_zstd, format="parquet")
    stats = [f.stats or {} for f in snap.files]
    mere_amount_files = sum(
        1 for s in stats if (s.get("maxValues") or {}).get("amount", float("inf")) > amount_cut
    )
    pa_meta = pq.ParquetFile(pa_zstd).metadata
    amount_idx = pa_meta.schema.to_arrow_schema().get_field_index("amount")
    pa_amount_groups = sum(
        1
        for i in range(pa_meta.num_row_groups)
        if pa_meta.row_group(i).column(amount_idx).statistics.max > amount_cut
    )
    filters = [
        (
            "amount > X (clustered)",
            pc.field("amount") > amount_cut,
            f"amount > {amount_cut!r}",
            {
                "mere_files_read": f"{mere_amount_files}/{len(snap.files)}",
                "pyarrow_row_groups_read": f"{pa_amount_groups}/{pa_meta.num_row_groups}",
            },
        ),
        (
            "customer_id < Y (random)",
            pc.field("customer_id") < customer_cut,
            f"customer_id < {customer_cut}",
            {
                "mere_files_read": f"{len(snap.files)}/{len(snap.files)}",
                "pyarrow_row_groups_read": f"{pa_meta.num_row_groups}/{pa_meta.num_row_groups}",
            },
        ),
    ]
    for label, expr, sql, info in filters:
        group = f"filter {label}"
        expected = None
        cases_c: list[tuple[str, Callable[[], pa.Table]]] = [
            ("pyarrow.dataset (zstd file)", lambda e=expr: pa_ds.to_table(filter=e)),
            ("pyarrow.dataset over mere's files", lambda e=expr: mere_ds.to_table(filter=e)),
            ("mere scan(filter=...)", lambda s=sql: read_mere(filter=s)),
        ]
        for name, fn in cases_c:
            times, out = timed(fn, reps, f"{label}: {name}")
            if expected is None:
                expected = out.num_rows
            assert out.num_rows == expected, (name, out.num_rows, expected)
            record(group, name, times, out.num_rows, filter=sql, **info)
            del out

    # (d) one column ----------------------------------------------------------------
    print("(d) one column", flush=True)
    cases_d: list[tuple[str, Callable[[], pa.Table]]] = [
        ("pyarrow read_table columns=[amount]", lambda: pq.read_table(pa_zstd, columns=["amount"])),
        ("pyarrow.dataset over mere's files", lambda: mere_ds.to_table(columns=["amount"])),
        ("mere scan(columns=[amount])", lambda: read_mere(columns=["amount"])),
    ]
    for name, fn in cases_d:
        times, out = timed(fn, reps, name)
        assert out.num_rows == args.rows
        record("column amount", name, times, out.num_rows)
        del out

    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)

    # report ---------------------------------------------------------------------------
    baselines = {
        "write": "pyarrow write_table zstd",
        "full read": "pyarrow read_table (zstd file)",
        "filter amount > X (clustered)": "pyarrow.dataset (zstd file)",
        "filter customer_id < Y (random)": "pyarrow.dataset (zstd file)",
        "column amount": "pyarrow read_table columns=[amount]",
    }
    for r in results.values():
        base = results[f"{r['group']}: {baselines[r['group']]}"]
        r["ratio_time_vs_pyarrow"] = r["median_s"] / base["median_s"]
    print()
    print(
        f"Throughput, {args.rows:,} rows, median of {reps} "
        f"(ratio = time / pyarrow zstd time of the same group; >1 is slower)"
    )
    headers = ["group", "what", "median s", "cpu s", "Mrows/s", "rows out", "ratio", "notes"]
    rows = []
    for r in results.values():
        notes = []
        if "bytes" in r:
            notes.append(f"{r['bytes'] / 2**20:,.0f} MiB")
        if "files" in r:
            notes.append(f"{r['files']} files")
        if r["name"].startswith("mere") and "mere_files_read" in r:
            notes.append(f"files read {r['mere_files_read']}")
        if r["name"].startswith("pyarrow.dataset (") and "pyarrow_row_groups_read" in r:
            notes.append(f"row groups read {r['pyarrow_row_groups_read']}")
        rows.append(
            [
                r["group"],
                r["name"],
                r["median_s"],
                r["cpu_median_s"],
                r["rows_per_s"] / 1e6,
                r["rows"],
                r["ratio_time_vs_pyarrow"],
                ", ".join(notes),
            ]
        )
    print(c.format_table(headers, rows))
    out_path = c.write_results(
        "throughput",
        {
            "parameters": vars(args),
            "arrow_bytes": data.nbytes,
            "amount_cut": amount_cut,
            "customer_cut": customer_cut,
            "results": list(results.values()),
        },
        args.output,
    )
    print(f"\nresults: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
