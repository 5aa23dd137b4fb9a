"""Many writers, one log: N processes appending to one local database, one row at a time.

Issue 17 item 5. Each writer process (``forkserver``) opens the database,
waits at a barrier, then appends one row at a time, with no pause between
commits, for ``--duration`` seconds: to a table of its own (``--tables
own``, N tables) or all to one table (``--tables shared``). Blind appends
never conflict, so every lost race (``Log.put_commit`` returning LOST) is
pure overhead: the loser reads the winners' commits, rebases and puts again.
Reported per writer count: acknowledged commits per second of all writers
together, lost races per commit, commit latency (p50, p99, max) and each
writer's acknowledged commits (``per_writer``, and its minimum: a writer that
never gets a commit through the race shows 1 here, its first commit having
taken the whole run). Checked at the end: the log's versions are dense and
each writer's rows are in its table exactly once.

    nice -n -10 .venv/bin/python benchmarks/many_writers.py --writers 1 8 --duration 10
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _common as c
import mere
from commit_latency import make_row, summarize
from mere.log.log import Log, PutOutcome

BARRIER_TIMEOUT = 120.0
JOIN_SLACK = 120.0
SETTLE_SECONDS = 3.0


def writer(
    path: str, worker: int, table_name: str, duration: float, barrier: Any, results: Any
) -> None:
    """Append one row at a time to ``table_name`` for ``duration`` seconds."""
    lost = [0]
    original = Log.put_commit

    def counting(self: Log, version: int, data: bytes, commit_id: str) -> PutOutcome:
        outcome = original(self, version, data, commit_id)
        lost[0] += outcome is PutOutcome.LOST
        return outcome

    Log.put_commit = counting  # type: ignore[method-assign]
    out: dict[str, Any] = {"worker": worker}
    try:
        db = mere.connect(path, create=False)
        table = db.table(table_name)
        table.schema  # noqa: B018  (read the log once before the clock starts)
        barrier.wait(BARRIER_TIMEOUT)
        latencies: list[float] = []
        cpu0, times0 = time.process_time(), os.times()
        start = time.perf_counter()
        deadline = start + duration
        i = 0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            table.append([make_row(worker * 1_000_000_000 + i)])
            latencies.append(time.perf_counter() - t0)
            i += 1
        out.update(
            elapsed=time.perf_counter() - start,
            cpu=time.process_time() - cpu0,
            user=os.times().user - times0.user,
            system=os.times().system - times0.system,
            latencies=latencies,
            lost=lost[0],
        )
    except Exception as exc:  # reported to the parent, which fails the run
        out["fatal"] = f"{type(exc).__name__}: {exc}"
    results.put(out)


def table_of(worker: int, tables: str) -> str:
    """The table a writer appends to: its own (``tables="own"``) or ``t0`` for all."""
    return f"t{worker}" if tables == "own" else "t0"


def settle() -> None:
    """Let the disk finish the last series' deletes (``discard`` on this machine's ext4).

    Without this, the series after another's clean-up paid for it: one writer
    measured 292 commits/s after an 8-writer series and 459 before any.
    """
    os.sync()
    time.sleep(SETTLE_SECONDS)


def run(workdir: Path, writers: int, tables: str, duration: float) -> dict[str, Any]:
    path = workdir / f"w{writers}-{tables}"
    shutil.rmtree(path, ignore_errors=True)
    settle()
    db = mere.connect(str(path))
    for name in sorted({table_of(w, tables) for w in range(writers)}):
        db.create_table(name, c.BASELINE_SCHEMA)
    start_version = db.version
    ctx = mp.get_context("forkserver")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [
        ctx.Process(
            target=writer,
            args=(str(path), w, table_of(w, tables), duration, barrier, results),
        )
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    deadline = time.monotonic() + BARRIER_TIMEOUT + duration + JOIN_SLACK
    outs: list[dict[str, Any]] = []
    try:
        while len(outs) < writers:
            outs.append(results.get(timeout=max(1.0, deadline - time.monotonic())))
        for p in procs:
            p.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(10)
    fatal = [o["fatal"] for o in outs if "fatal" in o]
    if fatal:
        raise RuntimeError(f"writer failed: {fatal}")
    commits = sum(len(o["latencies"]) for o in outs)
    db = mere.connect(str(path), create=False)
    assert db.version == start_version + commits, (db.version, start_version, commits)
    ids: dict[str, list[int]] = {}
    for name in {table_of(w, tables) for w in range(writers)}:
        ids[name] = db.table(name).scan(["id"]).column("id").to_pylist()
    for o in outs:
        base = o["worker"] * 1_000_000_000
        mine = sorted(
            i - base
            for i in ids[table_of(o["worker"], tables)]
            if i // 1_000_000_000 == o["worker"]
        )
        assert mine == list(range(len(o["latencies"]))), (o["worker"], len(mine))
    window = max(o["elapsed"] for o in outs)
    lost = sum(o["lost"] for o in outs)
    per_writer = [len(o["latencies"]) for o in sorted(outs, key=lambda o: o["worker"])]
    result = {
        "series": f"{writers} writers, {tables} tables",
        "writers": writers,
        "tables": tables,
        "per_writer": per_writer,
        "min_per_writer": min(per_writer),
        "commits": commits,
        "commits_per_s": commits / window,
        "lost_races": lost,
        "lost_per_commit": lost / max(1, commits),
        "cpu_ms_per_commit": 1000 * sum(o["cpu"] for o in outs) / max(1, commits),
        "user_ms_per_commit": 1000 * sum(o["user"] for o in outs) / max(1, commits),
        "system_ms_per_commit": 1000 * sum(o["system"] for o in outs) / max(1, commits),
        "latency": summarize([x for o in outs for x in o["latencies"]]),
    }
    shutil.rmtree(path, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--tables",
        nargs="+",
        default=["own", "shared"],
        choices=["own", "shared"],
        help="each writer appends to a table of its own, or all to one table",
    )
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--workdir", default="/tmp/mere-bench/many_writers")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)
    c.print_machine()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    series = []
    for n in args.writers:
        for tables in args.tables if n > 1 else args.tables[:1]:
            load = os.getloadavg()[0]
            r = run(workdir, n, tables, args.duration)
            r["load_before"] = load
            series.append(r)
            lat = r["latency"]
            print(
                f"{r['series']}: {r['commits_per_s']:.0f} commits/s, "
                f"{r['lost_per_commit']:.2f} lost races per commit, "
                f"{r['cpu_ms_per_commit']:.2f} ms CPU per commit "
                f"({r['user_ms_per_commit']:.2f} user), "
                f"p50 {lat['p50_ms']:.2f} ms p99 {lat['p99_ms']:.2f} ms "
                f"max {lat['max_ms']:.0f} ms, per writer {r['per_writer']} "
                f"(min {r['min_per_writer']}) (load {load:.1f})",
                flush=True,
            )
    out = c.write_results("many_writers", {"parameters": vars(args), "series": series}, args.output)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
