"""Changing rows beside delta-rs: delete, update and merge on the same table, in one run.

The table (``--rows``, default 10M; id int64 sorted, customer_id int64,
amount float64, country string, note string) is written to both engines as
``--chunk`` (default 1M) row appends, so each holds several files; the two
directories are built once under ``--workdir`` and reused.

For each operation and repetition, each engine gets a fresh copy of its
directory (``shutil.copytree``, not timed), then one fresh subprocess opens
the table (not timed) and times the operation alone:

(a) delete 1% of rows by key range: ``id >= A AND id < B``;
(b) update 1% of rows by key range: ``amount = amount + 1``;
(c) merge ``--merge-rows`` (default 100k) source rows, half matching existing
    ids, half new: when matched update all, when not matched insert all.

mere: ``db.table("t").delete/update/merge``; delta-rs:
``DeltaTable(p).delete/update/merge``. Medians of ``--reps`` (default 3),
engines interleaved. deltalake runs only in subprocesses whose result is read
from stdout: deltalake 1.6.6 can abort at interpreter exit (code 134), which
must not fail the benchmark.

    .venv/bin/python benchmarks/dml_vs_delta.py --rows 10000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import _common as c

BENCH = Path(__file__).resolve()
COUNTRIES = ["DE", "FR", "US", "JP", "BR", "IN", "GB", "ES"]
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("customer_id", pa.int64()),
        pa.field("amount", pa.float64()),
        pa.field("country", pa.string()),
        pa.field("note", pa.string()),
    ]
)


def chunk(start: int, n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = np.arange(start, start + n, dtype=np.int64)
    id_array = pa.array(ids)
    return pa.table(
        {
            "id": id_array,
            "customer_id": pa.array(rng.integers(0, 1_000_000, n, dtype=np.int64)),
            "amount": pa.array(np.round(rng.random(n) * 1000.0, 2)),
            "country": pa.array(COUNTRIES).take(pa.array(rng.integers(0, 8, n).astype(np.int32))),
            "note": pc.binary_join_element_wise("order ", pc.cast(id_array, pa.string()), ""),
        },
        schema=SCHEMA,
    )


def merge_source(rows: int, n: int) -> pa.Table:
    """``n`` rows: half existing ids (from 3/4 of the key range), half new ids."""
    half = n // 2
    old = chunk(rows * 3 // 4, half, seed=7)
    new = chunk(rows, n - half, seed=8)
    t = pa.concat_tables([old, new])
    return t.set_column(2, "amount", pc.add(t["amount"], 0.5))


def ranges(rows: int) -> dict[str, tuple[int, int]]:
    one = max(rows // 100, 1)
    return {"delete": (rows // 2, rows // 2 + one), "update": (rows // 4, rows // 4 + one)}


def build(workdir: Path, rows: int, chunk_rows: int) -> dict[str, Path]:
    paths = {e: workdir / f"{e}-{rows}" for e in ("mere", "delta")}
    for engine, path in paths.items():
        if (workdir / f"{path.name}.done").exists():
            print(f"reusing {path}", flush=True)
            continue
        r = c.run_worker(BENCH, f"build-{engine}", path, rows=rows, chunk=chunk_rows)
        (workdir / f"{path.name}.done").write_text(json.dumps(r))
    return paths


def worker(args: argparse.Namespace) -> None:
    """Runs in a subprocess; prints one ``RESULT {json}`` line."""
    path = Path(args.path)
    rows = args.rows
    out: dict[str, Any] = {}
    lo_hi = ranges(rows)
    if args.worker.startswith("build-"):
        if path.exists():
            shutil.rmtree(path)
        prog = c.Progress(args.worker, rows, every=1.0)
        t0 = time.perf_counter()
        if args.worker == "build-mere":
            import mere

            db = mere.connect(str(path))
            db.create_table("t", SCHEMA)
            t = db.table("t")
            for i, start in enumerate(range(0, rows, args.chunk)):
                t.append(chunk(start, min(args.chunk, rows - start), seed=i))
                prog.update(min(start + args.chunk, rows))
        else:
            from deltalake import write_deltalake

            for i, start in enumerate(range(0, rows, args.chunk)):
                write_deltalake(
                    str(path), chunk(start, min(args.chunk, rows - start), seed=i), mode="append"
                )
                prog.update(min(start + args.chunk, rows))
        out = {"seconds": time.perf_counter() - t0}
    elif args.worker.endswith("-mere"):
        import mere

        op = args.worker.split("-")[0]
        t = mere.connect(str(path), create=False).table("t")
        src = merge_source(rows, args.merge_rows) if op == "merge" else None
        t0 = time.perf_counter()
        if op == "delete":
            a, b = lo_hi["delete"]
            res: Any = t.delete(f"id >= {a} AND id < {b}")
        elif op == "update":
            a, b = lo_hi["update"]
            res = t.update(f"id >= {a} AND id < {b}", {"amount": "amount + 1"})
        else:
            res = (
                t.merge(src, on="t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        out = {"seconds": time.perf_counter() - t0, "result": repr(res)[:300]}
    else:
        from deltalake import DeltaTable

        op = args.worker.split("-")[0]
        dt = DeltaTable(str(path))
        src = merge_source(rows, args.merge_rows) if op == "merge" else None
        t0 = time.perf_counter()
        if op == "delete":
            a, b = lo_hi["delete"]
            res = dt.delete(f"id >= {a} and id < {b}")
        elif op == "update":
            a, b = lo_hi["update"]
            res = dt.update(updates={"amount": "amount + 1"}, predicate=f"id >= {a} and id < {b}")
        else:
            res = (
                dt.merge(src, predicate="t.id = s.id", source_alias="s", target_alias="t")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute()
            )
        keep = (
            "num_deleted_rows",
            "num_updated_rows",
            "num_target_rows_updated",
            "num_target_rows_inserted",
            "num_added_files",
            "num_removed_files",
            "num_target_files_added",
            "num_target_files_removed",
        )
        out = {
            "seconds": time.perf_counter() - t0,
            "result": {k: v for k, v in dict(res).items() if k in keep},
        }
    print("RESULT " + json.dumps(out, default=str), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--chunk", type=int, default=1_000_000, help="rows per append when building")
    p.add_argument("--merge-rows", type=int, default=100_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ops", default="delete,update,merge")
    p.add_argument("--workdir", default="/tmp/mere-bench-delta/dml")
    p.add_argument("--output", default=None)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return

    c.print_machine()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    paths = build(workdir, args.rows, args.chunk)
    for e, path in paths.items():
        files = sorted(path.rglob("part-*.parquet"))
        size = sum(f.stat().st_size for f in files)
        print(f"{e}: {path} ({len(files)} data files, {size / 2**20:,.0f} MiB)", flush=True)

    times: dict[str, dict[str, list[float]]] = {}
    details: dict[str, dict[str, list[Any]]] = {}
    rows: list[list[Any]] = []
    for op in args.ops.split(","):
        times[op] = {"mere": [], "delta": []}
        details[op] = {"mere": [], "delta": []}
        for rep in range(args.reps):
            for e in ("mere", "delta"):
                work = workdir / f"work-{e}"
                if work.exists():
                    shutil.rmtree(work)
                shutil.copytree(paths[e], work)
                r = c.run_worker(
                    BENCH, f"{op}-{e}", work, rows=args.rows, merge_rows=args.merge_rows
                )
                shutil.rmtree(work)
                times[op][e].append(r["seconds"])
                details[op][e].append(r)
                print(f"  {op} {e} rep {rep + 1}: {r['seconds']:.3f} s  {r['result']}", flush=True)
        m, d = c.median(times[op]["mere"]), c.median(times[op]["delta"])
        rows.append([op, m, d, m / d])

    print()
    print(f"{args.rows:,} rows, median of {args.reps}, seconds")
    print(c.format_table(["operation", "mere s", "delta-rs s", "mere/delta"], rows))
    out = c.write_results(
        "dml_vs_delta",
        {
            "rows": args.rows,
            "chunk": args.chunk,
            "merge_rows": args.merge_rows,
            "reps": args.reps,
            "seconds": times,
            "details": details,
            "table": rows,
        },
        args.output,
    )
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
