"""Multi-process commits on Azurite: racing writers, and writers killed with SIGKILL.

Azurite's create-only put is atomic under races (shared notes: 0 bad rounds
in 2000), so these tests exercise mere's own concurrency control over a real
HTTP object store: several OS processes, each with its own connection pool,
committing to one log.

* **racing**: 6 processes x 20 appends to one table. Every append is
  acknowledged; the log is dense; each value appears exactly once, first at
  the version its writer was told.
* **crash**: writers commit transactions that append the same value to two
  tables, and are SIGKILLed at random moments (and replaced). Afterwards
  every version opens, every acknowledged commit is present at its version,
  nothing appears twice, and the two tables agree at every version.

Children start with "forkserver" (never "fork": the pytest process runs
threads). Writers record each acknowledgement with one ``os.write`` of a
whole line, so a kill never leaves a torn record.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cloud_servers
import pyarrow as pa
import pytest
from cloud_history import Outcomes, check_history, tables_agree

import mere

pytestmark = [
    pytest.mark.azure,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="POSIX processes and signals"),
]

SCHEMA = pa.schema([pa.field("value", pa.string(), nullable=False)])
WAIT = 120.0


# --- children (module level, so the fork server can import them) ---------------------


def _record(out: int, value: str, version: int) -> None:
    os.write(out, f"{value} {version}\n".encode())


def append_worker(endpoint: str, prefix: str, writer: int, appends: int, log_path: str) -> None:
    """Append ``appends`` values, one transaction each; record every acknowledgement."""
    db = mere.connect(
        cloud_servers.azure_store(endpoint, prefix=prefix), create=False, max_commit_attempts=200
    )
    table = db.table("t")
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        for seq in range(appends):
            value = f"w{writer}-{seq}"
            while True:
                try:
                    version = table.append([{"value": value}])
                    break
                except mere.RetriesExhausted:  # definitely not committed: try again
                    time.sleep(random.uniform(0, 0.05))
            _record(out, value, version)
    finally:
        os.close(out)


def pair_worker(endpoint: str, prefix: str, writer: int, log_path: str) -> None:
    """Forever: one transaction appending the same value to tables a and b."""
    db = mere.connect(
        cloud_servers.azure_store(endpoint, prefix=prefix), create=False, max_commit_attempts=200
    )
    out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    seq = 0
    while True:
        value = f"w{writer}-{seq}"
        seq += 1
        try:
            with db.transaction() as tx:
                tx.table("a").append([{"value": value}])
                tx.table("b").append([{"value": value}])
        except mere.RetriesExhausted:
            continue
        assert tx.commit_version is not None
        _record(out, value, tx.commit_version)


# --- the parent side -------------------------------------------------------------------


@pytest.fixture
def context(request: pytest.FixtureRequest) -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["mere", "obstore", request.module.__name__])
    return context


@pytest.fixture
def children() -> Iterator[list[multiprocessing.process.BaseProcess]]:
    """The test's child processes; any still running at teardown are killed."""
    started: list[multiprocessing.process.BaseProcess] = []
    yield started
    for process in started:
        if process.is_alive():
            process.kill()
    for process in started:
        process.join(WAIT)


def read_acks(paths: list[Path]) -> Outcomes:
    outcomes = Outcomes.empty()
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            value, _, version = line.partition(" ")
            outcomes.acked[value] = int(version)
    return outcomes


def new_database(prefix: str, tables: list[str]) -> None:
    store = cloud_servers.azure_store(cloud_servers.azurite().endpoint, prefix=prefix)
    db = mere.connect(store)
    with db.transaction() as tx:
        for name in tables:
            tx.create_table(name, SCHEMA)


def test_racing_appends_from_six_processes(
    context: multiprocessing.context.BaseContext,
    children: list[multiprocessing.process.BaseProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    writers, appends = 6, 20
    endpoint = cloud_servers.azurite().endpoint
    prefix = cloud_servers.unique_prefix("race")
    new_database(prefix, ["t"])
    logs = [tmp_path / f"writer-{w}.log" for w in range(writers)]
    started = time.monotonic()
    for w in range(writers):
        process = context.Process(
            target=append_worker, args=(endpoint, prefix, w, appends, str(logs[w])), daemon=True
        )
        process.start()
        children.append(process)
    deadline = time.monotonic() + WAIT
    for process in children:
        process.join(max(0.0, deadline - time.monotonic()))
    assert not [p for p in children if p.is_alive()], "writers still running"
    assert [p.exitcode for p in children] == [0] * writers
    elapsed = time.monotonic() - started
    outcomes = read_acks(logs)
    assert len(outcomes.acked) == writers * appends
    store = cloud_servers.azure_store(endpoint, prefix=prefix)
    report = check_history(store, "t", "value", outcomes)
    assert report["versions"] == 2 + writers * appends  # create db, create table, appends
    with capsys.disabled():
        print(f"\n[azurite race] {writers}x{appends} appends in {elapsed:.1f} s: {report}")


def test_writers_killed_at_random_moments(
    context: multiprocessing.context.BaseContext,
    children: list[multiprocessing.process.BaseProcess],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rng = random.Random(20240612)
    endpoint = cloud_servers.azurite().endpoint
    prefix = cloud_servers.unique_prefix("crash")
    new_database(prefix, ["a", "b"])
    logs: list[Path] = []
    running: list[multiprocessing.process.BaseProcess] = []

    def start_writer() -> None:
        writer = len(logs)
        logs.append(tmp_path / f"writer-{writer}.log")
        process = context.Process(
            target=pair_worker, args=(endpoint, prefix, writer, str(logs[-1])), daemon=True
        )
        process.start()
        children.append(process)
        running.append(process)

    for _ in range(3):
        start_writer()
    kills = 0
    until = time.monotonic() + 6.0
    while time.monotonic() < until:
        time.sleep(rng.uniform(0.1, 0.6))
        victim = running.pop(rng.randrange(len(running)))
        assert victim.is_alive(), f"a writer died on its own (exit code {victim.exitcode})"
        victim.kill()
        victim.join(WAIT)
        kills += 1
        start_writer()
    for process in running:
        process.kill()
        process.join(WAIT)
    outcomes = read_acks(logs)
    assert outcomes.acked, "no commit was acknowledged"
    store = cloud_servers.azure_store(endpoint, prefix=prefix)
    report = check_history(store, "a", "value", outcomes)
    latest = tables_agree(store, ["a", "b"], "value")
    with capsys.disabled():
        print(f"\n[azurite crash] {kills} kills, {latest + 1} versions: {report}")
