"""Many writers, one log: N processes appending to N different tables of one local database.

Issue 17 item 5. Each writer process (``forkserver``) opens the database,
waits at a barrier, then appends one row at a time to its own table for
``--duration`` seconds. Blind appends to different tables never conflict, so
every lost race (``Log.put_commit`` returning LOST) is pure overhead: the
loser reads the winners' commits, rebases and puts again. Reported per
writer count: acknowledged commits per second of all writers together, lost
races per commit, and commit latency (p50, p99). Checked at the end: the
log's versions are dense and each table holds exactly its writer's
acknowledged rows.

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


def writer(path: str, worker: int, duration: float, barrier: Any, results: Any) -> None:
    """Append one row at a time to table ``t<worker>`` for ``duration`` seconds."""
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
        table = db.table(f"t{worker}")
        table.schema  # noqa: B018  (read the log once before the clock starts)
        barrier.wait(BARRIER_TIMEOUT)
        latencies: list[float] = []
        cpu0 = time.process_time()
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
            latencies=latencies,
            lost=lost[0],
        )
    except Exception as exc:  # reported to the parent, which fails the run
        out["fatal"] = f"{type(exc).__name__}: {exc}"
    results.put(out)


def run(workdir: Path, writers: int, duration: float) -> dict[str, Any]:
    path = workdir / f"w{writers}"
    shutil.rmtree(path, ignore_errors=True)
    db = mere.connect(str(path))
    for w in range(writers):
        db.create_table(f"t{w}", c.BASELINE_SCHEMA)
    start_version = db.version
    ctx = mp.get_context("forkserver")
    barrier, results = ctx.Barrier(writers), ctx.Queue()
    procs = [
        ctx.Process(target=writer, args=(str(path), w, duration, barrier, results))
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
    for o in outs:
        rows = db.table(f"t{o['worker']}").scan(["id"]).num_rows
        assert rows == len(o["latencies"]), (o["worker"], rows)
    window = max(o["elapsed"] for o in outs)
    lost = sum(o["lost"] for o in outs)
    result = {
        "writers": writers,
        "commits": commits,
        "commits_per_s": commits / window,
        "lost_races": lost,
        "lost_per_commit": lost / max(1, commits),
        "cpu_ms_per_commit": 1000 * sum(o["cpu"] for o in outs) / max(1, commits),
        "latency": summarize([x for o in outs for x in o["latencies"]]),
    }
    shutil.rmtree(path, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--workdir", default="/tmp/mere-bench/many_writers")
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)
    c.print_machine()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    series = []
    for n in args.writers:
        load = os.getloadavg()[0]
        r = run(workdir, n, args.duration)
        r["load_before"] = load
        series.append(r)
        print(
            f"{n} writers: {r['commits_per_s']:.0f} commits/s, "
            f"{r['lost_per_commit']:.2f} lost races per commit, "
            f"{r['cpu_ms_per_commit']:.2f} ms CPU per commit, "
            f"p50 {r['latency']['p50_ms']:.2f} ms p99 {r['latency']['p99_ms']:.2f} ms "
            f"(load {load:.1f})",
            flush=True,
        )
    out = c.write_results("many_writers", {"parameters": vars(args), "series": series}, args.output)
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
