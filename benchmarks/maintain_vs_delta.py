"""Log upkeep beside delta-rs: snapshot open at many commits, compaction, vacuum.

Two tables are built once (reused from ``--workdir`` when a ``.done`` marker is
present), in parallel, one subprocess each, with progress output:

* mere: ``mere.connect(path, checkpoint_interval=100)`` (the default interval),
  one table, ``--commits + --tail`` one-row ``append`` commits;
* delta-rs: ``--commits + --tail`` one-row ``write_deltalake(mode="append")``
  commits through one ``DeltaTable`` handle; a checkpoint every ``--interval``
  commits (delta-rs 1.6.6 writes them itself from its post-commit hook, at
  versions 99, 199, ...; the build checks, and calls ``create_checkpoint()``
  only where one is missing).

``--tail`` (default 50) commits follow the last checkpoint, so both opens
replay about 50 commits after a checkpoint, as a reader arriving at a random
time would on average.

Measured:

(a) open: a fresh Python process per measurement (imports done first, not
    timed) times ``mere.connect(path, create=False).snapshot()`` vs
    ``DeltaTable(path)`` (which loads the log state eagerly); median of
    ``--opens`` (default 5);
(b) compaction of the ~10k one-row files: a copy of each built directory,
    ``db.table("t").compact()`` vs ``DeltaTable(p).optimize.compact()``;
(c) vacuum right after (b), retention 0: ``db.vacuum(retention=timedelta(0),
    force=True)`` vs ``dt.vacuum(retention_hours=0,
    enforce_retention_duration=False, dry_run=False)``.

(b) and (c) run in one fresh subprocess per engine and repetition. Every
deltalake call runs in a subprocess whose result is read from its stdout:
deltalake 1.6.6 can abort (exit code 134) at interpreter exit, which must not
fail the benchmark (shared/notes/spark-python-datasource.md).

    .venv/bin/python benchmarks/maintain_vs_delta.py --commits 10000
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path
from typing import Any

import _common as c

BENCH = Path(__file__).resolve()


def one_row(i: int) -> Any:
    import pyarrow as pa

    return pa.table(
        {
            "id": pa.array([i], pa.int64()),
            "customer_id": pa.array([i % 1000], pa.int64()),
            "amount": pa.array([float(i)], pa.float64()),
            "country": pa.array(["DE"], pa.string()),
            "note": pa.array([f"order {i}"], pa.string()),
        }
    )


def build_mere(path: Path, n: int, interval: int) -> dict[str, Any]:
    import mere

    if path.exists():
        shutil.rmtree(path)
    db = mere.connect(str(path), checkpoint_interval=interval)
    db.create_table("t", one_row(0).schema)
    t = db.table("t")
    prog = c.Progress(f"mere build {path.name}", n)
    t0 = time.perf_counter()
    for i in range(n):
        t.append(one_row(i))
        prog.update(i + 1)
    return {"seconds": time.perf_counter() - t0}


def build_delta(path: Path, n: int, interval: int) -> dict[str, Any]:
    from deltalake import DeltaTable, write_deltalake

    if path.exists():
        shutil.rmtree(path)
    prog = c.Progress(f"delta build {path.name}", n)
    created = 0
    t0 = time.perf_counter()
    write_deltalake(str(path), one_row(0), mode="append")  # version 0
    dt = DeltaTable(str(path))  # one handle: each append updates it incrementally
    for i in range(1, n):
        write_deltalake(dt, one_row(i), mode="append")
        version = i
        # delta-rs's post-commit hook writes a checkpoint when (version + 1) is a
        # multiple of the interval (99, 199, ...); add one only if it did not.
        if (version + 1) % interval == 0:
            ck = path / "_delta_log" / f"{version:020d}.checkpoint.parquet"
            if not ck.exists():
                dt.create_checkpoint()
                created += 1
        prog.update(i + 1)
    return {"seconds": time.perf_counter() - t0, "checkpoints_created_explicitly": created}


def worker(args: argparse.Namespace) -> None:
    """Runs in a subprocess; prints one JSON line."""
    path = Path(args.path)
    out: dict[str, Any] = {}
    if args.worker == "build-mere":
        out = build_mere(path, args.n, args.interval)
    elif args.worker == "build-delta":
        out = build_delta(path, args.n, args.interval)
    elif args.worker == "open-mere":
        import mere

        t0 = time.perf_counter()
        snap = mere.connect(str(path), create=False).snapshot()
        out = {"seconds": time.perf_counter() - t0, "version": snap.version}
    elif args.worker == "open-delta":
        from deltalake import DeltaTable

        t0 = time.perf_counter()
        dt = DeltaTable(str(path))
        out = {"seconds": time.perf_counter() - t0, "version": dt.version()}
    elif args.worker == "maint-mere":
        from datetime import timedelta

        import mere

        db = mere.connect(str(path), create=False)
        t0 = time.perf_counter()
        res = db.table("t").compact()
        out["compact_seconds"] = time.perf_counter() - t0
        out["compact_result"] = repr(res)[:300]
        t0 = time.perf_counter()
        vres = db.vacuum(retention=timedelta(0), force=True)
        out["vacuum_seconds"] = time.perf_counter() - t0
        out["vacuum_result"] = repr(vres)[:300]
    elif args.worker == "maint-delta":
        from deltalake import DeltaTable

        dt = DeltaTable(str(path))
        t0 = time.perf_counter()
        res = dt.optimize.compact()
        out["compact_seconds"] = time.perf_counter() - t0
        out["compact_result"] = {k: res.get(k) for k in ("numFilesAdded", "numFilesRemoved")}
        t0 = time.perf_counter()
        removed = dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        out["vacuum_seconds"] = time.perf_counter() - t0
        out["vacuum_result"] = {"files_deleted": len(removed)}
    print("RESULT " + json.dumps(out, default=str), flush=True)


def ensure_built(workdir: Path, n: int, interval: int) -> dict[str, Any]:
    paths = {e: workdir / f"{e}-{n}" for e in ("mere", "delta")}
    procs = {}
    for engine, path in paths.items():
        if (workdir / f"{path.name}.done").exists():
            print(f"reusing {path}", flush=True)
            continue
        procs[engine] = (path,)
    info: dict[str, Any] = {}
    # Build both at once (the build is not what is measured).
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(2) as ex:
        futs = {
            e: ex.submit(c.run_worker, BENCH, f"build-{e}", p[0], n=n, interval=interval)
            for e, p in procs.items()
        }
        for e, f in futs.items():
            info[e] = f.result()
            (workdir / f"{paths[e].name}.done").write_text(json.dumps(info[e]))
    return {"paths": paths, "builds": info}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--commits", type=int, default=10_000)
    p.add_argument("--tail", type=int, default=50, help="commits after the last checkpoint")
    p.add_argument("--interval", type=int, default=100, help="checkpoint interval")
    p.add_argument("--opens", type=int, default=5, help="fresh-process opens per engine")
    p.add_argument("--reps", type=int, default=1, help="compaction+vacuum repetitions")
    p.add_argument("--workdir", default="/tmp/mere-bench-delta/maintain")
    p.add_argument("--output", default=None)
    p.add_argument("--skip-maint", action="store_true")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args)
        return

    c.print_machine()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    n = args.commits + args.tail
    built = ensure_built(workdir, n, args.interval)
    paths = built["paths"]
    for e, path in paths.items():
        files = sum(1 for _ in path.rglob("*.parquet"))
        print(f"{e}: {path} ({files:,} parquet files incl. checkpoints)", flush=True)

    rows: list[list[Any]] = []
    payload: dict[str, Any] = {"commits": n, "interval": args.interval, "builds": built["builds"]}
    opens: dict[str, list[float]] = {"mere": [], "delta": []}
    for _ in range(args.opens):  # interleaved
        for e in ("mere", "delta"):
            r = c.run_worker(BENCH, f"open-{e}", paths[e])
            opens[e].append(r["seconds"])
    payload["open_seconds"] = opens
    om, od = c.median(opens["mere"]), c.median(opens["delta"])
    rows.append(
        [f"open snapshot, {n:,} commits (median of {args.opens})", c.ms(om), c.ms(od), om / od]
    )

    if not args.skip_maint:
        maint: dict[str, list[dict[str, Any]]] = {"mere": [], "delta": []}
        for rep in range(args.reps):
            for e in ("mere", "delta"):
                work = workdir / f"work-{e}"
                if work.exists():
                    shutil.rmtree(work)
                shutil.copytree(paths[e], work)
                print(f"  {e} compact+vacuum rep {rep + 1}", flush=True)
                maint[e].append(c.run_worker(BENCH, f"maint-{e}", work))
                shutil.rmtree(work)
        payload["maintenance"] = maint
        for key, label in (("compact_seconds", "compact"), ("vacuum_seconds", "vacuum")):
            m = c.median([r[key] for r in maint["mere"]])
            d = c.median([r[key] for r in maint["delta"]])
            rows.append(
                [
                    f"{label}, ~{args.commits:,} one-row files (n={args.reps})",
                    c.ms(m),
                    c.ms(d),
                    m / d,
                ]
            )
        for e in ("mere", "delta"):
            print(f"{e}: {maint[e][-1]}", flush=True)

    print()
    print(c.format_table(["measure", "mere ms", "delta-rs ms", "mere/delta"], rows))
    out = c.write_results("maintain_vs_delta", payload | {"table": rows}, args.output)
    print(f"\nresults: {out}")


if __name__ == "__main__":
    main()
