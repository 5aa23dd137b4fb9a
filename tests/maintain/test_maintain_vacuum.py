"""Vacuum: what it deletes, what it must never delete, and when it refuses."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from maintain_helpers import EVENTS, events, ids_of, wait_a_little

import mere
from mere.log.actions import CommitInfo, DatabaseMeta, Protocol, encode_commit
from mere.log.log import Log
from mere.maintain import RetentionTooShort, VacuumResult, vacuum
from mere.properties import MIN_RETENTION_PROPERTY
from mere.storage import LocalStore, MemoryStore
from mere.storage.base import ObjectStore

vacuum_module = importlib.import_module("mere.maintain.vacuum")
HOUR = timedelta(hours=1)


def data_keys(db: mere.Database) -> set[str]:
    return {m.key for m in db.store.list("tables/")}


def referenced(db: mere.Database, version: int) -> set[str]:
    snapshot = db.snapshot(version)
    return {
        f"tables/{snapshot.table(n).id}/{f.path}"
        for n in snapshot.tables()
        for f in snapshot.table(n).files
    }


def scans(db: mere.Database, version: int) -> dict[str, list[int]]:
    snapshot = db.snapshot(version)
    return {name: ids_of(snapshot.table(name)) for name in snapshot.tables()}


def history_then_cutoff(db: mere.Database) -> tuple[int, float]:
    """Versions 1-5 (create and fill ``events`` and ``gone``), a cutoff, then versions 6-8.

    After the cutoff: 6 deletes a row of ``events`` (its first file is rewritten),
    7 drops ``gone``, 8 appends. Returns (version current at the cutoff, the cutoff
    in seconds since the epoch).
    """
    db.create_table("events", EVENTS)
    db.table("events").append(events([1, 2]))
    db.table("events").append(events([3, 4]))
    db.create_table("gone", EVENTS)
    db.table("gone").append(events([9]))
    wait_a_little()
    cutoff = time.time()
    wait_a_little()
    db.table("events").delete("id = 1")  # rewrites the first file
    db.drop_table("gone")
    db.table("events").append(events([5]))
    return 5, cutoff


def test_vacuum_deletes_only_what_no_retained_version_reads(db_uri: str) -> None:
    db = mere.connect(db_uri)
    current_at_cutoff, cutoff = history_then_cutoff(db)
    latest = db.version
    expected = {v: scans(db, v) for v in range(current_at_cutoff, latest + 1)}
    keep = set().union(*(referenced(db, v) for v in range(current_at_cutoff, latest + 1)))
    everything = data_keys(db)

    result = vacuum(db, HOUR, now=cutoff + HOUR.total_seconds())

    assert result.oldest_retained_version == current_at_cutoff
    assert result.latest_version == latest
    # Nothing was garbage yet at the cutoff: every file a version >= cutoff reads is kept.
    assert data_keys(db) == everything - set(result.keys)
    assert keep <= data_keys(db)
    for version, rows in expected.items():
        assert scans(mere.connect(db_uri, create=False), version) == rows

    # Later: only the latest version is retained; the rewritten and dropped files go.
    final = vacuum(db, HOUR, now=time.time() + 2 * HOUR.total_seconds())
    assert final.oldest_retained_version == latest
    assert data_keys(db) == referenced(db, latest)
    assert set(final.keys) == everything - referenced(db, latest)
    assert final.files_deleted == len(final.keys) == 2  # the rewritten file, gone's file
    assert final.bytes_deleted > 0
    assert scans(mere.connect(db_uri, create=False), latest) == expected[latest]


def test_dry_run_deletes_nothing_and_reports_the_same(db_uri: str) -> None:
    db = mere.connect(db_uri)
    history_then_cutoff(db)
    before = data_keys(db)
    later = time.time() + 2 * HOUR.total_seconds()
    dry = vacuum(db, HOUR, dry_run=True, now=later)
    assert dry.dry_run and dry.files_deleted == 2 and len(dry.keys) == 2
    assert data_keys(db) == before
    real = vacuum(db, HOUR, now=later)
    assert sorted(real.keys) == sorted(dry.keys)
    assert real.bytes_deleted == dry.bytes_deleted
    assert data_keys(db) == before - set(real.keys)


def test_young_unreferenced_files_are_kept(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    tx = db.transaction()
    tx.table("events").append(events([1, 2, 3]))
    tx.table("events").scan()  # the data file is written; the transaction is still open
    (pending,) = data_keys(db)
    result = vacuum(db, timedelta(0), force=True, now=time.time() - 60)
    assert result.files_deleted == 0 and result.files_kept_young == 1
    assert pending in data_keys(db)
    tx.commit()
    assert ids_of(db.table("events")) == [1, 2, 3]


def test_a_retention_below_the_minimum_is_refused(db_uri: str) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    with pytest.raises(RetentionTooShort, match="below the minimum of 1:00:00") as caught:
        db.vacuum(timedelta(minutes=59))
    assert "not committed yet" in str(caught.value) and "force=True" in str(caught.value)
    with pytest.raises(RetentionTooShort):
        db.vacuum(timedelta(0), dry_run=True)
    with pytest.raises(ValueError, match="negative"):
        db.vacuum(timedelta(seconds=-1), force=True)
    assert isinstance(db.vacuum(timedelta(minutes=59), force=True), VacuumResult)
    assert isinstance(
        db.vacuum(timedelta(minutes=5), min_retention=timedelta(minutes=5)), VacuumResult
    )
    assert isinstance(db.vacuum(), VacuumResult)  # the default: 7 days


def _database_with_properties(store: ObjectStore, properties: dict[str, str]) -> mere.Database:
    """A database whose version 0 carries ``properties`` (no public API sets them yet)."""
    commit_id = uuid.uuid4().hex
    now = int(time.time() * 1000)
    info = CommitInfo(commit_id, now, None, "serializable", "CREATE DATABASE")
    actions = [Protocol(1), DatabaseMeta(uuid.uuid4().hex, properties, now)]
    Log(store).put_commit(0, encode_commit(info, actions), commit_id)
    return mere.connect(store, create=False)


def test_the_minimum_comes_from_the_database_property() -> None:
    db = _database_with_properties(MemoryStore(), {MIN_RETENTION_PROPERTY: "2h"})
    with pytest.raises(RetentionTooShort, match="2:00:00"):
        db.vacuum(timedelta(minutes=90))
    db.vacuum(timedelta(hours=3))
    short = _database_with_properties(MemoryStore(), {MIN_RETENTION_PROPERTY: "0s"})
    short.vacuum(timedelta(0))
    bad = _database_with_properties(MemoryStore(), {MIN_RETENTION_PROPERTY: "soon"})
    with pytest.raises(ValueError, match=MIN_RETENTION_PROPERTY):
        bad.vacuum()


def test_local_temp_file_leftovers_are_swept(tmp_path: Path) -> None:
    db = mere.connect(tmp_path / "db")
    db.create_table("events", EVENTS)
    db.table("events").append(events([1]))
    leftover = tmp_path / "db" / "_log" / ".mere-tmp-0123456789abcdef"
    leftover.write_bytes(b"half a commit")
    old = time.time() - 3 * 3600
    os.utime(leftover, (old, old))
    assert vacuum(db, HOUR, dry_run=True).temp_files_deleted == 1
    assert leftover.exists()
    assert vacuum(db, HOUR).temp_files_deleted == 1
    assert not leftover.exists()


def test_a_file_added_back_while_vacuum_runs_is_spared(
    db_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = mere.connect(db_uri)
    db.create_table("events", EVENTS)
    db.table("events").append(events([1, 2]))
    old_version = db.version
    db.table("events").delete("id >= 1")  # the file is now referenced by old versions only
    other = mere.connect(db_uri)
    store = db.store
    listing = store.list

    def list_then_restore(prefix: str = "", start_after: str | None = None) -> Iterator[Any]:
        yield from listing(prefix, start_after)
        if prefix == "tables/":  # vacuum has chosen its candidates: a restore lands now
            other.restore(version=old_version, tables=["events"])

    monkeypatch.setattr(store, "list", list_then_restore)
    result = vacuum(db, HOUR, now=time.time() + 2 * HOUR.total_seconds())
    assert result.files_deleted == 0
    assert ids_of(mere.connect(db_uri, create=False).table("events")) == [1, 2]


# --- killed writers -------------------------------------------------------------------


def _doomed_writer(db_path: str, first: int, ready: Any) -> None:
    """Write data files for a transaction, then hang until killed (never commit)."""
    db = mere.connect(db_path)
    tx = db.transaction()
    tx.table("events").append(events(range(first, first + 10)))
    tx.table("events").scan()  # flushes: the data files are in the store
    ready.set()
    time.sleep(120)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_vacuum_after_killed_writers(db_path: Path, processes: Any) -> None:
    db = mere.connect(db_path)
    db.create_table("events", EVENTS, partition_by=["part"])
    db.table("events").append(events(range(10)))
    committed = data_keys(db)

    readiness = [processes.context.Event() for _ in range(3)]
    children = [
        processes.start(_doomed_writer, str(db_path), 1000 * (i + 1), ready)
        for i, ready in enumerate(readiness)
    ]
    assert all(ready.wait(60) for ready in readiness), "a writer did not write its files"
    for child in children:
        os.kill(child.pid, signal.SIGKILL)
    processes.join(children)
    assert [child.exitcode for child in children] == [-signal.SIGKILL] * 3
    orphans = data_keys(db) - committed
    assert len(orphans) == 6  # two partitions, three writers

    wait_a_little()
    cutoff = time.time()
    wait_a_little()
    # More history after the cutoff: these versions (and the one current at it) are retained.
    db.table("events").append(events(range(10, 20)))
    db.table("events").delete("id < 5")
    db.table("events").compact()
    retained = range(db.version - 3, db.version + 1)
    expected = {v: scans(db, v) for v in retained}
    store = LocalStore(db_path)
    assert all(isinstance(m.modified, float) for m in store.list("tables/"))

    result = vacuum(db, HOUR, now=cutoff + HOUR.total_seconds())

    assert result.oldest_retained_version == retained[0]
    assert orphans <= set(result.keys), "orphans of killed writers were kept"
    assert set(result.keys) == orphans  # nothing a retained version reads
    fresh = mere.connect(db_path, create=False)
    for version, rows in expected.items():
        assert scans(fresh, version) == rows
    assert ids_of(fresh.table("events")) == list(range(5, 20))
