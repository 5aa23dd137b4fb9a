"""Commit latency and throughput on the S3 (moto) and Azure (Azurite) test servers.

Both servers run on 127.0.0.1, started by the test helpers in
``tests/cloud/cloud_servers.py`` (moto through ``moto_atomic.py``, whose
create-only PUT is atomic under races, like real S3's). For each server, in
one run:

* ``raw put_if_absent 1 KiB``: ``store.put_if_absent`` of a new 1 KiB object,
  one process, one after another -- the floor of one create-only request;
* ``mere append``: ``db.table("t").append([row])`` -- one transaction, one
  data file, one commit; with ``--inline on`` the data file is inlined in the
  commit (``inlineLimit``) -- by 1, 4 and 8 writer processes (``forkserver``)
  on one database, each appending for a fixed duration, all to table ``t``
  (``--tables shared``, the default) or each to a table of its own
  (``--tables own``). Latency is per
  acknowledged commit, including any lost races and rebases; commits/s is
  the acknowledged commits of all writers over the window.

``requests per commit``: one process, 60 single-row appends through a store
that counts and times every request (``_instrument.TimingStore``): how many
requests of each kind a commit makes, and what they cost.

Per writer it counts lost commit races (``Log.put_commit`` returning LOST),
conflict errors (blind appends must never raise one) and the store's own
transient-failure retries (``ObstoreStore.retries``). At the end of each run
it checks that the log's commit versions are dense, that the latest version
is the start version plus the acknowledged commits, and that the table holds
exactly the acknowledged rows.

These are local emulators, not the cloud services: the figures show mere's
cost on top of a request and how it scales with writers, not S3's or Azure's
latency.

    .venv/bin/python benchmarks/cloud_commits.py --duration 10 --puts 500
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time
import uuid
from typing import Any

import _common as c
from _instrument import TimingStore

REPO = c.BENCH_DIR.parent
sys.path.insert(0, str(REPO / "tests" / "cloud"))

import cloud_servers  # noqa: E402  (test helpers: server start/stop, store options)

import mere  # noqa: E402
from commit_latency import make_row, summarize  # noqa: E402
from mere.errors import ConflictError  # noqa: E402
from mere.log.keys import LOG_PREFIX, parse_log_key  # noqa: E402
from mere.log.log import Log, PutOutcome  # noqa: E402
from mere.storage import AzureStore, ObstoreStore, RetryPolicy, S3Store  # noqa: E402

OBJECT_SIZE = 1024
#: The stores' default retry policy: what a user gets.
RETRY = RetryPolicy()
BARRIER_TIMEOUT = 120.0
JOIN_TIMEOUT_SLACK = 120.0


def open_store(backend: str, endpoint: str, prefix: str) -> ObstoreStore:
    if backend == "s3":
        return S3Store(
            cloud_servers.BUCKET,
            prefix,
            storage_options=cloud_servers.s3_options(endpoint),
            retry=RETRY,
        )
    return AzureStore(
        cloud_servers.BUCKET,
        prefix,
        storage_options=cloud_servers.azure_options(endpoint),
        retry=RETRY,
    )


def raw_puts(backend: str, endpoint: str, n: int) -> dict[str, Any]:
    """``n`` create-only 1 KiB puts of new keys, one after another."""
    import os

    store = open_store(backend, endpoint, f"raw-{uuid.uuid4().hex[:12]}")
    payload = os.urandom(OBJECT_SIZE)
    for i in range(10):  # warm the connection pool
        store.put_if_absent(f"warm/{i:04d}", payload)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        store.put_if_absent(f"objects/{i:08d}", payload)
        samples.append(time.perf_counter() - t0)
    out = summarize(samples)
    out["store_retries"] = dict(store.retries)
    return out


def new_database(store: Any, inline: bool) -> mere.Database:
    """A fresh database with table ``t``; ``inline``: small data files inlined in commits."""
    db = mere.connect(store)
    db.create_table("t", c.BASELINE_SCHEMA)
    if inline:
        db.set_properties({"inlineLimit": "65536"})
    return db


def request_split(backend: str, endpoint: str, inline: bool, commits: int = 60) -> dict[str, Any]:
    """Requests per single-row append by one warm client, by operation and kind of object."""
    store = TimingStore(open_store(backend, endpoint, f"split-{uuid.uuid4().hex[:12]}"))
    db = new_database(store, inline)
    db.table("t").append([make_row(0)])  # warm: connections open, the log read once
    store.reset()
    t0 = time.perf_counter()
    for i in range(1, commits + 1):
        db.table("t").append([make_row(i)])
    elapsed = time.perf_counter() - t0
    split = store.snapshot()
    db.close()
    per_commit = {
        f"{op} {kind}": {"calls": calls / commits, "ms": 1000 * seconds / commits}
        for (op, kind), (seconds, calls, _bytes) in sorted(split.items())
    }
    return {
        "commits": commits,
        "requests_per_commit": sum(v["calls"] for v in per_commit.values()),
        "ms_per_commit": 1000 * elapsed / commits,
        "request_ms_per_commit": sum(v["ms"] for v in per_commit.values()),
        "by_request": per_commit,
    }


def table_of(worker: int, tables: str) -> str:
    """The table a writer appends to: ``t`` for all (``tables="shared"``) or its own."""
    return "t" if tables == "shared" else f"t{worker}"


def writer(
    backend: str,
    endpoint: str,
    prefix: str,
    worker: int,
    table: str,
    duration: float,
    barrier: Any,
    results: Any,
) -> None:
    """One writer process: append one row at a time for ``duration`` seconds."""
    lost = [0]
    original = Log.put_commit

    def counting_put_commit(self: Log, version: int, data: bytes, commit_id: str) -> PutOutcome:
        outcome = original(self, version, data, commit_id)
        if outcome is PutOutcome.LOST:
            lost[0] += 1
        return outcome

    Log.put_commit = counting_put_commit  # type: ignore[method-assign]
    out: dict[str, Any] = {"worker": worker}
    try:
        store = open_store(backend, endpoint, prefix)
        db = mere.connect(store, create=False)
        db.table(table).schema  # noqa: B018  (open connections, read the log once)
        barrier.wait(BARRIER_TIMEOUT)
        latencies: list[float] = []
        versions: list[int] = []
        ids: list[int] = []
        conflicts: list[str] = []
        errors: list[str] = []
        i = 0
        start = time.perf_counter()
        deadline = start + duration
        while time.perf_counter() < deadline:
            row_id = worker * 1_000_000_000 + i
            i += 1
            t0 = time.perf_counter()
            try:
                version = db.table(table).append([make_row(row_id)])
            except ConflictError as exc:
                conflicts.append(f"{type(exc).__name__}: {exc}")
                continue
            except Exception as exc:  # recorded, and the run is flagged
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - t0)
            versions.append(version)
            ids.append(row_id)
        out.update(
            elapsed=time.perf_counter() - start,
            latencies=latencies,
            versions=versions,
            ids=ids,
            lost_races=lost[0],
            conflicts=conflicts,
            errors=errors,
            store_retries=dict(store.retries),
        )
        db.close()
    except Exception as exc:
        out["fatal"] = f"{type(exc).__name__}: {exc}"
    results.put(out)


def run_writers(
    ctx: Any,
    backend: str,
    endpoint: str,
    writers: int,
    duration: float,
    inline: bool,
    tables: str = "shared",
) -> dict[str, Any]:
    """``writers`` processes appending to one fresh database; figures and checks."""
    prefix = f"w{writers}-{uuid.uuid4().hex[:12]}"
    db = new_database(open_store(backend, endpoint, prefix), inline)
    names = sorted({table_of(w, tables) for w in range(writers)})
    for name in names:
        if name != "t":
            db.create_table(name, c.BASELINE_SCHEMA)
    start_version = db.version
    db.close()

    barrier = ctx.Barrier(writers)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=writer,
            args=(backend, endpoint, prefix, w, table_of(w, tables), duration, barrier, results),
        )
        for w in range(writers)
    ]
    for p in procs:
        p.start()
    outs: list[dict[str, Any]] = []
    deadline = time.monotonic() + BARRIER_TIMEOUT + duration + JOIN_TIMEOUT_SLACK
    try:
        while len(outs) < writers:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RuntimeError(f"writers did not report within the time limit ({prefix})")
            outs.append(results.get(timeout=remaining))
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

    latencies = [x for o in outs for x in o["latencies"]]
    versions = [v for o in outs for v in o["versions"]]
    ids = {i for o in outs for i in o["ids"]}
    commits = len(versions)
    window = max(o["elapsed"] for o in outs)
    retries: dict[str, int] = {}
    for o in outs:
        for k, v in o["store_retries"].items():
            retries[k] = retries.get(k, 0) + v

    # Checks: dense versions, latest = start + acknowledged, rows = acknowledged.
    store = open_store(backend, endpoint, prefix)
    db = mere.connect(store, create=False)
    latest = db.version
    listed = sorted(
        parsed[0]
        for meta in store.list(LOG_PREFIX)
        if (parsed := parse_log_key(meta.key)) is not None and parsed[1] == "commit"
    )
    # From version 0: nothing is expired in a fresh database.
    dense = listed == list(range(0, latest + 1))
    row_list = [i for n in names for i in db.table(n).scan(columns=["id"]).column("id").to_pylist()]
    row_ids = set(row_list)
    db.close()
    checks = {
        "versions_dense": dense,
        "versions_acknowledged_unique": len(set(versions)) == commits,
        "acknowledged_versions_are_start_plus_1_to_n": sorted(versions)
        == list(range(start_version + 1, start_version + commits + 1)),
        "latest_equals_start_plus_commits": latest == start_version + commits,
        "row_count_equals_commits": len(row_list) == commits,
        "row_ids_equal_acknowledged": row_ids == ids,
    }
    per_writer = [len(o["versions"]) for o in sorted(outs, key=lambda o: o["worker"])]
    return {
        "writers": writers,
        "inline": inline,
        "tables": tables,
        "duration_s": window,
        "commits": commits,
        "commits_per_second": commits / window,
        "per_writer_commits": per_writer,
        "min_per_writer": min(per_writer),
        "latency": summarize(latencies),
        "lost_races": sum(o["lost_races"] for o in outs),
        "conflicts": [x for o in outs for x in o["conflicts"]],
        "errors": [x for o in outs for x in o["errors"]],
        "store_retries": retries,
        "start_version": start_version,
        "latest_version": latest,
        "rows": len(row_list),
        "checks": checks,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per writer run")
    parser.add_argument("--puts", type=int, default=500, help="raw put_if_absent samples")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--backends", nargs="+", default=["s3", "azure"], choices=["s3", "azure"])
    parser.add_argument("--start-method", default="forkserver", choices=["spawn", "forkserver"])
    parser.add_argument(
        "--inline",
        nargs="+",
        default=["off", "on"],
        choices=["off", "on"],
        help="data files stored as objects (off) and/or inlined in commits (on)",
    )
    parser.add_argument(
        "--tables",
        default="shared",
        choices=["shared", "own"],
        help="writers append to one table t (shared) or each to a table of its own",
    )
    parser.add_argument("--skip-split", action="store_true", help="skip the requests per commit")
    parser.add_argument("--json", default=None, help="results path (default benchmarks/results)")
    args = parser.parse_args()

    c.print_machine()
    ctx = mp.get_context(args.start_method)
    results: dict[str, Any] = {}
    servers: list[cloud_servers.Server] = []
    try:
        for backend in args.backends:
            if backend == "s3":
                server = cloud_servers.moto()
            else:
                if cloud_servers.azurite_binary() is None:
                    sys.exit("Azurite is not installed: run scripts/setup.sh")
                server = cloud_servers.azurite()
            servers.append(server)
            name = "s3 (moto, atomic PUT)" if backend == "s3" else "azure (Azurite, in memory)"
            print(f"\n== {name} at {server.endpoint}", flush=True)
            raw = raw_puts(backend, server.endpoint, args.puts)
            print(
                f"  raw put_if_absent 1 KiB: p50 {raw['p50_ms']:.2f} ms  "
                f"p99 {raw['p99_ms']:.2f} ms  (n={raw['n']})",
                flush=True,
            )
            splits = {}
            for mode in args.inline if not args.skip_split else []:
                split = request_split(backend, server.endpoint, mode == "on")
                splits[mode] = split
                print(
                    f"  requests per commit, inline {mode}: {split['requests_per_commit']:.2f} "
                    f"({split['request_ms_per_commit']:.1f} ms of {split['ms_per_commit']:.1f} "
                    "ms): "
                    + ", ".join(
                        f"{name} x{v['calls']:.2f} {v['ms']:.1f} ms"
                        for name, v in split["by_request"].items()
                    ),
                    flush=True,
                )
            runs = []
            for w in args.writers:
                for mode in args.inline:
                    run = run_writers(
                        ctx, backend, server.endpoint, w, args.duration, mode == "on", args.tables
                    )
                    runs.append(run)
            for run in runs:
                w, mode = run["writers"], "on" if run["inline"] else "off"
                lat = run["latency"]
                ok = all(run["checks"].values())
                print(
                    f"  {w} writer(s), inline {mode}: {run['commits']} commits, "
                    f"{run['commits_per_second']:.1f}/s, p50 {lat['p50_ms']:.1f} ms, "
                    f"p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.0f} ms, "
                    f"per writer {run['per_writer_commits']}, lost races {run['lost_races']}, "
                    f"conflicts {len(run['conflicts'])}, errors {len(run['errors'])}, "
                    f"store retries {sum(run['store_retries'].values())}, "
                    f"checks {'ok' if ok else run['checks']}",
                    flush=True,
                )
            results[backend] = {
                "server": name,
                "raw_put_if_absent_1KiB": raw,
                "requests_per_commit": splits,
                "writers": runs,
            }
            rows = [
                [
                    "raw put_if_absent 1 KiB",
                    1,
                    raw["n"],
                    float("nan"),
                    raw["p50_ms"],
                    raw["p99_ms"],
                    float("nan"),
                    float("nan"),
                ]
            ]
            for run in runs:
                rows.append(
                    [
                        "mere append (1 row, inlined)" if run["inline"] else "mere append (1 row)",
                        run["writers"],
                        run["commits"],
                        run["commits_per_second"],
                        run["latency"]["p50_ms"],
                        run["latency"]["p99_ms"],
                        run["lost_races"] / max(run["commits"], 1),
                        len(run["conflicts"]),
                    ]
                )
            print()
            print(
                c.format_table(
                    [
                        "series",
                        "procs",
                        "n",
                        "commits/s",
                        "p50 ms",
                        "p99 ms",
                        "lost races/commit",
                        "conflicts",
                    ],
                    rows,
                )
            )
    finally:
        for server in servers:
            server.stop()
    out = c.write_results(
        "cloud_commits",
        {
            "duration_s": args.duration,
            "start_method": args.start_method,
            "tables": args.tables,
            "object_size": OBJECT_SIZE,
            "results": results,
        },
        args.json,
    )
    print(f"\nresults: {out}")
    failed = [
        (b, r["writers"], r["inline"])
        for b, v in results.items()
        for r in v["writers"]
        if not all(r["checks"].values()) or r["conflicts"] or r["errors"]
    ]
    if failed:
        sys.exit(f"checks failed for {failed}")


if __name__ == "__main__":
    main()
