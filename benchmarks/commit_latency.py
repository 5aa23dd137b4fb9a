"""Commit latency of a one-row append on the local store, beside the raw cost of durability.

Measured side by side in one run, interleaved in blocks so that disk noise
hits every series alike:

* ``mere append``: ``db.table("t").append([row])`` -- one transaction, one
  data file, one commit -- on a LocalStore (fsync'd put-if-absent);
* ``mere append (inlined)``: the same in a database with ``inlineLimit`` set,
  where the data file travels inside the commit (one durable create);
* ``raw put_if_absent``: ``LocalStore.put_if_absent`` of a new 1 KiB object
  (temp file, fsync, link, unlink, fsync dir) -- the floor of one durable,
  atomic create;
* ``raw fsync``: open a new file, write 1 KiB, ``os.fsync``, close.

Then a second, instrumented run splits a commit into phases (discovering the
latest version, validating the rows, encoding and writing the data file,
encoding and writing the commit, the hint and checkpoints after it) and
counts store requests per commit (``FaultyStore.calls``). A third run on a
MemoryStore gives the CPU cost of a commit with no I/O at all.

    .venv/bin/python benchmarks/commit_latency.py --commits 1000
"""

from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import _common as c
import mere
from _instrument import PhaseTimer, TimingStore
from mere.data.writer import DataFileWriter
from mere.database import Database
from mere.log.log import Log
from mere.snapshot.state import DatabaseState
from mere.storage import FaultyStore, LocalStore, MemoryStore, ObjectStore
from mere.txn import transaction as _transaction
from mere.txn.transaction import TxTable

try:
    _committer: ModuleType = importlib.import_module("mere.txn.committer")
except ImportError:  # before the transaction-core rebuild: no committer module
    _committer = _transaction

OBJECT_SIZE = 1024

# The phases of a commit timed by the instrumented run, each with where to find
# it. They are the same leaf calls before and after the transaction-core rebuild
# (commit bb70f32), so the two versions can be compared phase by phase: the
# commit's encoding moved from mere.txn.transaction to mere.txn.committer, which
# also decodes it and applies it to the base state before the put (the old core
# applied it after the put); the after-commit hook was renamed.
PHASES: list[tuple[str, list[tuple[object, str]]]] = [
    ("discover latest version", [(Log, "latest_version")]),
    ("append: validate rows, stats, buffer", [(TxTable, "append")]),
    ("data file: encode (+ put_if_absent unless inlined)", [(DataFileWriter, "finish")]),
    ("log: encode commit", [(_committer, "encode_commit"), (_transaction, "encode_commit")]),
    ("log: decode commit (validation)", [(_committer, "decode_commit")]),
    ("state: apply commit", [(DatabaseState, "apply")]),
    ("log: put_if_absent commit", [(Log, "put_commit")]),
    ("after commit: hint + checkpoint", [(Database, "after_commit"), (Database, "_committed")]),
]


def make_row(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "customer_id": 1000 + i % 977,
        "amount": round(10.0 + (i % 1000) * 0.37, 2),
        "ts": datetime(2026, 1, 1, tzinfo=UTC),
        "country": ("DE", "FR", "US", "JP", "BR")[i % 5],
        "note": f"order {i}",
    }


def new_db(target: str | ObjectStore, checkpoint_interval: int, inline: bool = False) -> Database:
    db = mere.connect(target, checkpoint_interval=checkpoint_interval)
    db.create_table("t", c.BASELINE_SCHEMA)
    if inline:  # small data files travel in their commit (a version without it ignores this)
        db.set_properties({"inlineLimit": "65536"})
    return db


def summarize(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": c.ms(c.percentile(samples, 50)),
        "p90_ms": c.ms(c.percentile(samples, 90)),
        "p99_ms": c.ms(c.percentile(samples, 99)),
        "mean_ms": c.ms(sum(samples) / len(samples)) if samples else float("nan"),
        "max_ms": c.ms(max(samples)) if samples else float("nan"),
    }


def raw_fsync(directory: Path, i: int, payload: bytes) -> tuple[float, float]:
    """Create, write, fsync and close a new file; (whole time, fsync alone)."""
    path = directory / f"f{i:08d}"
    t0 = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, payload)
        t1 = time.perf_counter()
        os.fsync(fd)
        t2 = time.perf_counter()
    finally:
        os.close(fd)
    t3 = time.perf_counter()
    return t3 - t0, t2 - t1


def run_side_by_side(workdir: Path, commits: int, block: int, interval: int) -> dict[str, Any]:
    """Interleave blocks of mere commits, raw puts and raw fsyncs."""
    payload = os.urandom(OBJECT_SIZE)
    raw_store = LocalStore(workdir / "raw-put")
    fsync_dir = workdir / "raw-fsync"
    fsync_dir.mkdir(parents=True)
    db = new_db(str(workdir / "db"), interval)
    start_version = db.version
    inlining = new_db(str(workdir / "inline-db"), interval, inline=True)

    series: dict[str, list[float]] = defaultdict(list)
    checkpoint_commits: list[float] = []
    other_commits: list[float] = []
    progress = c.Progress("side by side", commits)
    wall_mere = 0.0
    done = 0
    while done < commits:
        n = min(block, commits - done)
        for j in range(n):
            whole, sync = raw_fsync(fsync_dir, done + j, payload)
            series["raw fsync (open+write+fsync+close)"].append(whole)
            series["raw fsync (fsync call only)"].append(sync)
        for j in range(n):
            t0 = time.perf_counter()
            raw_store.put_if_absent(f"objects/{done + j:08d}", payload)
            series["raw put_if_absent 1 KiB"].append(time.perf_counter() - t0)
        t_block = time.perf_counter()
        for j in range(n):
            t0 = time.perf_counter()
            version = db.table("t").append([make_row(done + j)])
            dt = time.perf_counter() - t0
            series["mere append (1 row)"].append(dt)
            (checkpoint_commits if version % interval == 0 else other_commits).append(dt)
        wall_mere += time.perf_counter() - t_block
        for j in range(n):
            t0 = time.perf_counter()
            inlining.table("t").append([make_row(done + j)])
            series["mere append (1 row, inlined)"].append(time.perf_counter() - t0)
        done += n
        progress.update(done)
    assert db.version == start_version + commits
    out = {name: summarize(v) for name, v in series.items()}
    out["mere append, commits that wrote a checkpoint"] = summarize(checkpoint_commits)
    out["mere append, other commits"] = summarize(other_commits)
    out["_commits_per_second"] = commits / wall_mere
    return out


def run_instrumented(
    target: str | ObjectStore, commits: int, interval: int, inline: bool = False
) -> dict[str, Any]:
    """Commit again through a timing store and phase timers; per-commit averages."""
    if isinstance(target, str):
        inner: ObjectStore = LocalStore(target)
    else:
        inner = target
    counted = FaultyStore(inner)  # no faults: its ``calls`` counter counts requests
    timing = TimingStore(counted)
    db = new_db(timing, interval, inline=inline)
    timing.reset()
    base_calls = dict(counted.calls)

    phases = PhaseTimer()
    for name, candidates in PHASES:
        # The first (owner, attribute) this version of mere has; the phases are
        # leaf calls that do not nest in one another, so they add up.
        for owner, attr in candidates:
            if attr in vars(owner):
                phases.wrap(owner, attr, name)  # type: ignore[arg-type]
                break

    store_totals: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0, 0])
    phase_totals: dict[str, float] = defaultdict(float)
    totals: list[float] = []
    try:
        with phases:
            phases.snapshot()
            for i in range(commits):
                t0 = time.perf_counter()
                db.table("t").append([make_row(i)])
                totals.append(time.perf_counter() - t0)
                for k, (s, n, b) in timing.snapshot().items():
                    acc = store_totals[k]
                    acc[0] += s
                    acc[1] += n
                    acc[2] += b
                for name, s in phases.snapshot().items():
                    phase_totals[name] += s
    finally:
        db.close()
    total = sum(totals)
    phase_rows = []
    for name, s in phase_totals.items():
        phase_rows.append({"phase": name, "mean_ms": c.ms(s / commits), "share": s / total})
    rest = total - sum(phase_totals.values())
    phase_rows.append(
        {"phase": "other (Table/Transaction setup, Python)", "mean_ms": c.ms(rest / commits)}
    )
    phase_rows[-1]["share"] = rest / total
    store_rows = []
    for (op, kind), (s, n, b) in sorted(store_totals.items(), key=lambda kv: -kv[1][0]):
        store_rows.append(
            {
                "op": op,
                "kind": kind,
                "calls_per_commit": n / commits,
                "mean_ms_per_commit": c.ms(s / commits),
                "share": s / total,
                "bytes_per_call": (b / n) if n and b else None,
            }
        )
    calls = {op: (counted.calls[op] - base_calls.get(op, 0)) / commits for op in counted.calls}
    return {
        "commits": commits,
        "mean_ms": c.ms(total / commits),
        "p50_ms": c.ms(c.percentile(totals, 50)),
        "phases": phase_rows,
        "store": store_rows,
        "requests_per_commit": calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=1000, help="commits per series")
    parser.add_argument("--block", type=int, default=100, help="interleaving block size")
    parser.add_argument(
        "--checkpoint-interval", type=int, default=100, help="mere checkpoint interval"
    )
    parser.add_argument(
        "--workdir", default="/tmp/mere-bench/commit_latency", help="scratch directory (wiped)"
    )
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)

    c.print_machine()
    workdir = Path(args.workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    print(f"commit latency: {args.commits} commits per series, scratch {workdir}", flush=True)
    side = run_side_by_side(workdir / "side", args.commits, args.block, args.checkpoint_interval)
    print("instrumented run (LocalStore) ...", flush=True)
    split = run_instrumented(str(workdir / "split"), args.commits, args.checkpoint_interval)
    print("instrumented run (MemoryStore, no I/O) ...", flush=True)
    memory = run_instrumented(MemoryStore("bench"), args.commits, args.checkpoint_interval)
    print("instrumented run (MemoryStore, no I/O, inlined) ...", flush=True)
    memory_inlined = run_instrumented(
        MemoryStore("bench-inlined"), args.commits, args.checkpoint_interval, inline=True
    )
    shutil.rmtree(workdir, ignore_errors=True)

    commits_per_second = side.pop("_commits_per_second")
    mere_p50 = side["mere append (1 row)"]["p50_ms"]
    inlined_p50 = side["mere append (1 row, inlined)"]["p50_ms"]
    put_p50 = side["raw put_if_absent 1 KiB"]["p50_ms"]
    fsync_p50 = side["raw fsync (open+write+fsync+close)"]["p50_ms"]

    print()
    print("Latency (ms)")
    rows = [
        [name, s["n"], s["p50_ms"], s["p90_ms"], s["p99_ms"], s["mean_ms"], s["max_ms"]]
        for name, s in side.items()
    ]
    print(c.format_table(["series", "n", "p50", "p90", "p99", "mean", "max"], rows))
    print()
    print(f"mere commits/second (one writer, sequential): {commits_per_second:,.0f}")
    print(f"ratio mere append p50 / raw put_if_absent p50: {mere_p50 / put_p50:.2f}")
    print(f"ratio inlined append p50 / raw put_if_absent:  {inlined_p50 / put_p50:.2f}")
    print(f"ratio mere append p50 / raw fsync p50:         {mere_p50 / fsync_p50:.2f}")
    print(
        f"MemoryStore (no I/O) append: p50 {memory['p50_ms']:.3f} ms, "
        f"mean {memory['mean_ms']:.3f} ms; inlined: p50 {memory_inlined['p50_ms']:.3f} ms, "
        f"mean {memory_inlined['mean_ms']:.3f} ms"
    )
    print()
    print(f"Where a commit's time goes (LocalStore, mean {split['mean_ms']:.3f} ms/commit)")
    print(
        c.format_table(
            ["phase", "ms/commit", "share"],
            [[p["phase"], p["mean_ms"], f"{p['share']:.0%}"] for p in split["phases"]],
        )
    )
    print()
    print("Store requests per commit (LocalStore)")
    print(
        c.format_table(
            ["op", "object", "calls/commit", "ms/commit", "share", "bytes/call"],
            [
                [
                    r["op"],
                    r["kind"],
                    r["calls_per_commit"],
                    r["mean_ms_per_commit"],
                    f"{r['share']:.0%}",
                    "" if r["bytes_per_call"] is None else int(r["bytes_per_call"]),
                ]
                for r in split["store"]
            ],
        )
    )
    print(
        "FaultyStore.calls per commit: "
        + ", ".join(f"{k} {v:.2f}" for k, v in sorted(split["requests_per_commit"].items()))
    )
    out = c.write_results(
        "commit_latency",
        {
            "parameters": vars(args),
            "latency": side,
            "commits_per_second": commits_per_second,
            "ratio_append_p50_to_put_p50": mere_p50 / put_p50,
            "ratio_append_p50_to_fsync_p50": mere_p50 / fsync_p50,
            "ratio_inlined_p50_to_put_p50": inlined_p50 / put_p50,
            "split_local": split,
            "split_memory": memory,
            "split_memory_inlined": memory_inlined,
        },
        args.output,
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
