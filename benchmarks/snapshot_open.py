"""Time to open a snapshot: a new Database object, no cached state, from the log alone.

Four databases are built once (and reused from ``--workdir`` when present):
1k and 10k one-row append commits, each with checkpoints every 100 commits
and without checkpoints (``checkpoint_interval`` above the commit count). The
latest version of each is ``commits + tail`` (``--tail``, default 50), so an
open with checkpoints replays the commits after the last checkpoint, as a
reader arriving at a random time would on average.

Each measurement runs in a fresh Python process (``mere`` imported, then
``mere.connect(path, create=False).snapshot(...)`` timed): no state cache, no
warm Python objects; the OS page cache is warm, as for any recently written
log. The same process then opens a new Database object ``--inproc`` more
times (warm imports, no mere cache). Each open's process CPU time is
recorded beside its wall time (on a busy machine, the steadier of the two).
Also measured: time travel to version 500 of the largest databases. Each
result is named by its database and open ("1000 commits, checkpoints,
latest"), the key ``compare_versions.py`` reports it under.

The baseline, side by side: an I/O floor -- one more process records every
object the open reads (through a timing store) and then reads the same
objects' bytes with plain ``open().read()``, sequentially, without decoding.

    .venv/bin/python benchmarks/snapshot_open.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import _common as c

BENCH = Path(__file__).resolve()


def db_path(workdir: Path, commits: int, checkpoints: bool, tail: int) -> Path:
    kind = "ckpt100" if checkpoints else "nockpt"
    return workdir / f"db-{commits}-{kind}-tail{tail}"


def build(path: Path, target: int, interval: int) -> float:
    """Append one-row commits until the latest version is ``target``; seconds spent."""
    import mere
    from commit_latency import make_row

    db = mere.connect(str(path), checkpoint_interval=interval)
    if "t" not in db.tables():
        db.create_table("t", c.BASELINE_SCHEMA)
    version = db.version
    if version >= target:
        return 0.0
    print(f"building {path.name}: version {version} -> {target}", flush=True)
    progress = c.Progress(path.name, target)
    t0 = time.perf_counter()
    table = db.table("t")
    while version < target:
        version = table.append([make_row(version)])
        progress.update(version)
    return time.perf_counter() - t0


# --- the child process --------------------------------------------------------


def child_open(path: str, version: int | None, inproc: int) -> dict[str, Any]:
    """Runs in a fresh process: time the first open, then ``inproc`` more."""
    import mere

    times = []
    cpu = []  # process CPU time of the same opens: less at the mercy of a busy machine
    files = -1
    opened = -1
    budget = time.perf_counter() + 3.0  # slow opens (10k commits, no checkpoint): fewer repeats
    for i in range(1 + inproc):
        if i > 1 and time.perf_counter() > budget:
            break
        t0, c0 = time.perf_counter(), time.process_time()
        db = mere.connect(path, create=False)
        snap = db.snapshot(version)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        opened = snap.version
        files = len(snap.table("t").files)
        db.close()
    return {
        "first_s": times[0],
        "inproc_s": times[1:],
        "first_cpu_s": cpu[0],
        "inproc_cpu_s": cpu[1:],
        "version": opened,
        "files": files,
    }


def child_count(path: str, version: int | None) -> dict[str, Any]:
    """Runs in a fresh process: requests of one open, then the I/O floor for them."""
    import mere
    from _instrument import TimingStore
    from mere.storage import LocalStore

    store = TimingStore(LocalStore(path))
    t0 = time.perf_counter()
    db = mere.connect(store, create=False)
    db.snapshot(version)
    open_s = time.perf_counter() - t0
    state = db.state_at(db.snapshot(version).version)  # cached by now: no more reads
    keys = list(dict.fromkeys(store.keys_read))
    requests = {
        f"{op} {kind}": {"calls": n, "seconds": s}
        for (op, kind), (s, n, _b) in store.snapshot().items()
    }
    del db
    root = Path(path)
    floor_runs = []
    nbytes = 0
    for _ in range(3):
        t0 = time.perf_counter()
        nbytes = 0
        for key in keys:
            with open(root / key, "rb") as f:
                nbytes += len(f.read())
        floor_runs.append(time.perf_counter() - t0)
    # The commits the open replayed, read again: with Log.read_commits (a thread
    # pool) and with a plain loop, to see what the pool buys on a local disk.
    from mere.log.keys import parse_log_key
    from mere.log.log import Log

    versions = sorted(p[0] for p in map(parse_log_key, keys) if p is not None and p[1] == "commit")
    pooled, sequential = [], []
    if versions:
        log = Log(LocalStore(path))
        first, last = versions[0], versions[-1]
        for _ in range(3 if len(versions) < 2000 else 1):
            t0 = time.perf_counter()
            log.read_commits(first, last)
            pooled.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            for v in range(first, last + 1):
                log.read_commit(v)
            sequential.append(time.perf_counter() - t0)
    # What a checkpoint of this state costs to write (encode only, no I/O): the
    # commit that lands on a multiple of the interval pays it.
    from mere.log.checkpoint import encode_checkpoint

    encode_runs = []
    size = 0
    for _ in range(3):
        t0 = time.perf_counter()
        size = len(encode_checkpoint(state.version, state.timestamp, list(state.live_actions())))
        encode_runs.append(time.perf_counter() - t0)
    return {
        "checkpoint_encode_s": c.median(encode_runs),
        "checkpoint_bytes": size,
        "commits_replayed": len(versions),
        "read_commits_pool_s": c.median(pooled),
        "read_commits_sequential_s": c.median(sequential),
        "instrumented_open_s": open_s,
        "requests": requests,
        "objects_read": len(keys),
        "bytes_read": nbytes,
        "floor_s": c.median(floor_runs),
    }


def spawn(args: list[str]) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, str(BENCH), *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(path: Path, version: int | None, runs: int, inproc: int) -> dict[str, Any]:
    vargs = [] if version is None else ["--version", str(version)]
    samples = [
        spawn(["--child-open", str(path), "--inproc", str(inproc), *vargs]) for _ in range(runs)
    ]
    counted = spawn(["--child-count", str(path), *vargs])
    fresh = [s["first_s"] for s in samples]
    warm = [t for s in samples for t in s["inproc_s"]]
    fresh_cpu = [s["first_cpu_s"] for s in samples]
    warm_cpu = [t for s in samples for t in s["inproc_cpu_s"]]
    return {
        "version": samples[0]["version"],
        "files": samples[0]["files"],
        "fresh_process_ms": [c.ms(t) for t in fresh],
        "fresh_process_median_ms": c.ms(c.median(fresh)),
        "in_process_median_ms": c.ms(c.median(warm)) if warm else float("nan"),
        "fresh_process_cpu_median_ms": c.ms(c.median(fresh_cpu)),
        "in_process_cpu_median_ms": c.ms(c.median(warm_cpu)) if warm_cpu else float("nan"),
        "objects_read": counted["objects_read"],
        "bytes_read": counted["bytes_read"],
        "requests": counted["requests"],
        "io_floor_ms": c.ms(counted["floor_s"]),
        "commits_replayed": counted["commits_replayed"],
        "checkpoint_encode_ms": c.ms(counted["checkpoint_encode_s"]),
        "checkpoint_bytes": counted["checkpoint_bytes"],
        "read_commits_pool_ms": c.ms(counted["read_commits_pool_s"]),
        "read_commits_sequential_ms": c.ms(counted["read_commits_sequential_s"]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--commits", default="1000,10000", help="comma-separated commit counts (default 1k, 10k)"
    )
    parser.add_argument("--tail", type=int, default=50, help="commits after the last checkpoint")
    parser.add_argument("--interval", type=int, default=100, help="checkpoint interval")
    parser.add_argument("--runs", type=int, default=5, help="fresh processes per measurement")
    parser.add_argument(
        "--inproc", type=int, default=3, help="extra opens per process (fewer past 3 s)"
    )
    parser.add_argument("--time-travel", type=int, default=500, help="version for time travel")
    parser.add_argument(
        "--workdir", default="/tmp/mere-bench/snapshot_open", help="databases (kept, reused)"
    )
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    parser.add_argument("--child-open", help=argparse.SUPPRESS)
    parser.add_argument("--child-count", help=argparse.SUPPRESS)
    parser.add_argument("--version", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child_open:
        print(json.dumps(child_open(args.child_open, args.version, args.inproc)))
        return 0
    if args.child_count:
        print(json.dumps(child_count(args.child_count, args.version)))
        return 0

    c.print_machine()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    counts = [int(x) for x in args.commits.split(",") if x]
    configs = [(n, ckpt) for n in counts for ckpt in (True, False)]
    builds = {}
    for n, ckpt in configs:
        path = db_path(workdir, n, ckpt, args.tail)
        interval = args.interval if ckpt else n + args.tail + 1_000_000
        builds[path.name] = build(path, n + args.tail, interval)

    results: list[dict[str, Any]] = []
    for n, ckpt in configs:
        path = db_path(workdir, n, ckpt, args.tail)
        cases: list[tuple[str, int | None]] = [("latest", None)]
        if n == max(counts) and args.time_travel < n:
            cases.append((f"time travel to {args.time_travel}", args.time_travel))
        for label, version in cases:
            print(f"measuring {path.name} ({label}) ...", flush=True)
            r = measure(path, version, args.runs, args.inproc)
            kind = "checkpoints" if ckpt else "no checkpoint"
            r.update(commits=n, checkpoints=ckpt, open=label, name=f"{n} commits, {kind}, {label}")
            results.append(r)

    print()
    print(
        f"Snapshot open, median of {args.runs} fresh processes (ms); "
        f"checkpoint interval {args.interval}, tail {args.tail}"
    )
    headers = [
        "commits",
        "checkpoints",
        "open",
        "version",
        "fresh proc",
        "in-process",
        "objects read",
        "I/O floor",
        "open/floor",
    ]
    rows = [
        [
            r["commits"],
            "on" if r["checkpoints"] else "off",
            r["open"],
            r["version"],
            r["fresh_process_median_ms"],
            r["in_process_median_ms"],
            r["objects_read"],
            r["io_floor_ms"],
            r["fresh_process_median_ms"] / r["io_floor_ms"],
        ]
        for r in results
    ]
    print(c.format_table(headers, rows))
    print()
    print("Replaying the same commits: Log.read_commits (8-thread pool) vs a plain loop (ms)")
    print(
        c.format_table(
            ["commits", "checkpoints", "open", "replayed", "read_commits", "loop"],
            [
                [
                    r["commits"],
                    "on" if r["checkpoints"] else "off",
                    r["open"],
                    r["commits_replayed"],
                    r["read_commits_pool_ms"],
                    r["read_commits_sequential_ms"],
                ]
                for r in results
            ],
        )
    )
    print()
    print("Writing a checkpoint of the opened state (encode only, no I/O)")
    print(
        c.format_table(
            ["commits", "open", "data files", "encode ms", "bytes"],
            [
                [
                    r["commits"],
                    r["open"],
                    r["files"],
                    r["checkpoint_encode_ms"],
                    r["checkpoint_bytes"],
                ]
                for r in results
                if r["checkpoints"]
            ],
        )
    )
    print()
    print("Requests of one open (calls)")
    for r in results:
        req = ", ".join(f"{k} {v['calls']}" for k, v in sorted(r["requests"].items()))
        print(f"  {r['commits']:>6} {'ckpt' if r['checkpoints'] else 'none':>4} {r['open']}: {req}")
    out = c.write_results(
        "snapshot_open",
        {"parameters": vars(args), "build_seconds": builds, "results": results},
        args.output,
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
