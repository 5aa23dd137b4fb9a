"""Small transactions from one writer on the Azure (Azurite) or S3 (moto) test server.

Issue 17's streaming-ingest shape: one writer commits 10-row transactions
(``db.table("t").append(rows)``) for ``--duration`` seconds and reports rows
per second, commits per second and commit latency, with the requests per
commit counted by ``_instrument.TimingStore``; once with the data files
stored as objects (a data file and a commit each), once with them inlined in
the commit (``inlineLimit``), alternating which runs first in each round.
DuckLake with a PostgreSQL catalog was reported at 253 rows/s for 10-row
inserts (pg_ducklake blog); these servers run on 127.0.0.1, so their round
trips are far shorter than a cloud service's.

    nice -n -10 .venv/bin/python benchmarks/small_txns.py --backend azure --duration 20 --rounds 2
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from typing import Any

import _common as c
from _instrument import TimingStore

sys.path.insert(0, str(c.BENCH_DIR.parent / "tests" / "cloud"))

import cloud_servers

import mere
from cloud_commits import open_store
from commit_latency import make_row, summarize


def run_series(
    backend: str, endpoint: str, rows_per_tx: int, duration: float, inline: bool
) -> dict[str, Any]:
    """One writer committing ``rows_per_tx``-row transactions for ``duration`` seconds."""
    store = TimingStore(open_store(backend, endpoint, f"tx-{uuid.uuid4().hex}"))
    db = mere.connect(store)
    db.create_table("t", c.BASELINE_SCHEMA)
    if inline:
        db.set_properties({"inlineLimit": "65536"})
    db.table("t").append([make_row(-1)])  # warm: connections open, the log read once
    store.reset()
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + duration
    i = 0
    while time.perf_counter() < deadline:
        rows = [make_row(i + k) for k in range(rows_per_tx)]
        t0 = time.perf_counter()
        db.table("t").append(rows)
        latencies.append(time.perf_counter() - t0)
        i += rows_per_tx
    elapsed = time.perf_counter() - start
    requests = sum(calls for _s, calls, _b in store.snapshot().values())
    assert db.table("t").scan(["id"]).num_rows == i + 1
    commits = len(latencies)
    return {
        "inline": inline,
        "commits": commits,
        "rows_per_s": i / elapsed,
        "commits_per_s": commits / elapsed,
        "requests_per_commit": requests / max(1, commits),
        "latency": summarize(latencies),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["azure", "s3"], default="azure")
    parser.add_argument("--rows", type=int, default=10, help="rows per transaction")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per series")
    parser.add_argument(
        "--rounds", type=int, default=1, help="rounds of (stored, inlined), alternating order"
    )
    parser.add_argument("--output", help="JSON output (default benchmarks/results/<name>.json)")
    args = parser.parse_args(argv)
    c.print_machine()
    server = cloud_servers.azurite() if args.backend == "azure" else cloud_servers.moto()
    series: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            for inline in (False, True) if r % 2 == 0 else (True, False):
                result = run_series(args.backend, server.endpoint, args.rows, args.duration, inline)
                series.append(result)
                print(
                    f"{args.backend} {'inlined' if inline else 'stored '}: "
                    f"{result['rows_per_s']:.0f} rows/s, {result['commits_per_s']:.1f} "
                    f"commits/s, {result['requests_per_commit']:.2f} requests per commit, "
                    f"p50 {result['latency']['p50_ms']:.1f} ms, "
                    f"p99 {result['latency']['p99_ms']:.1f} ms"
                )
    finally:
        server.stop()
    out = c.write_results(
        "small_txns",
        {"parameters": vars(args), "backend": args.backend, "series": series},
        args.output,
    )
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
