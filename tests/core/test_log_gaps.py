"""A missing or empty commit file is reported for what it is, by every operation that meets it.

A commit file missing while versions below and above it exist is a gap in the
log: every reader that needs it raises ``CorruptLog`` naming the missing file
and saying it is a gap, never "version N does not exist" (which is what a
version beyond the latest, or one removed by expiry, gets). An empty commit
file is reported as empty, not as truncated.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import mere
from mere.log.keys import LATEST_HINT, commit_key

GAP = 3
LATEST = 5  # version 1 creates t, versions 2..5 append x = 0..3


@pytest.fixture
def gapped(db: mere.Database) -> mere.Database:
    """A database whose commit 3 is gone while commits 0..2 and 4..5 remain."""
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(LATEST - 1):
        db.table("t").append([{"x": i}])
    assert db.version == LATEST
    db.store.delete(commit_key(GAP))
    # Writers refresh the hint every HINT_INTERVAL versions; pin it at the latest,
    # so discovery starts beyond the gap and the operations below meet it.
    # (A gap ahead of the hint looks like the end of the log to discovery:
    # `mere check` finds it.)
    db.log.write_latest_hint(LATEST)
    return mere.connect(db.store, create=False)


def _gap_message() -> str:
    return rf"{commit_key(GAP)}: .*missing but later versions exist.*a gap in the log"


OPERATIONS: dict[str, Callable[[mere.Database], Any]] = {
    "version": lambda db: db.version,
    "snapshot": lambda db: db.snapshot(),
    "snapshot-at-gap": lambda db: db.snapshot(version=GAP),
    "snapshot-above-gap": lambda db: db.snapshot(version=GAP + 1),
    "scan": lambda db: db.table("t").scan(),
    "append": lambda db: db.table("t").append([{"x": 99}]),
    "history": lambda db: db.history(),
    "history-limit": lambda db: db.history(limit=3),
    "timestamp": lambda db: db.snapshot(timestamp=db.log.commit_timestamp(LATEST)),
    "restore": lambda db: db.restore(version=LATEST - 1),
    "vacuum": lambda db: db.vacuum(timedelta(0), force=True, dry_run=True),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_every_operation_reports_a_gap_as_a_gap(gapped: mere.Database, operation: str) -> None:
    with pytest.raises(mere.CorruptLog, match=_gap_message()) as caught:
        OPERATIONS[operation](gapped)
    assert "does not exist" not in str(caught.value)
    assert caught.value.key == commit_key(GAP)


def test_a_gap_is_reported_without_the_latest_version_hint(gapped: mere.Database) -> None:
    gapped.store.delete(LATEST_HINT)  # discovery by listing finds the top, then the gap
    with pytest.raises(mere.CorruptLog, match=_gap_message()):
        _ = mere.connect(gapped.store, create=False).version


def test_versions_below_a_gap_still_read(gapped: mere.Database) -> None:
    rows = gapped.snapshot(version=GAP - 1).table("t").scan().column("x").to_pylist()
    assert rows == [0]


def test_a_wider_gap_names_its_first_missing_version(gapped: mere.Database) -> None:
    gapped.store.delete(commit_key(GAP + 1))
    with pytest.raises(mere.CorruptLog, match=_gap_message()):
        _ = mere.connect(gapped.store, create=False).version


def test_a_version_beyond_the_latest_is_still_not_found(gapped: mere.Database) -> None:
    with pytest.raises(mere.VersionNotFound, match=f"version {LATEST + 1} does not exist"):
        gapped.log.read_commit(LATEST + 1)


def test_expired_versions_are_not_a_gap(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(4):
        db.table("t").append([{"x": i}])
    result = db.expire(timedelta(0), force=True)
    assert result.commits_deleted > 0
    with pytest.raises(mere.VersionNotFound, match="expired"):
        db.snapshot(version=0)
    with pytest.raises(mere.VersionNotFound, match="version 0 does not exist"):
        db.log.read_commit(0)
    assert [h["version"] for h in db.history()][-1] == result.oldest_version


def test_a_missing_version_0_is_not_a_gap_but_unrebuildable(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.store.delete(commit_key(0))
    with pytest.raises(mere.VersionNotFound, match="version 0 is missing"):
        _ = mere.connect(db.store, create=False).version


def test_an_empty_commit_file_is_reported_as_empty(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.table("t").append([{"x": 1}])
    db.store.delete(commit_key(2))
    db.store.put_if_absent(commit_key(2), b"")
    with pytest.raises(mere.CorruptLog, match=f"{commit_key(2)}: the commit file is empty") as e:
        _ = mere.connect(db.store, create=False).version
    assert "truncated" not in str(e.value)


def test_a_truncated_commit_is_still_reported_as_truncated(db: mere.Database) -> None:
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.table("t").append([{"x": 1}])
    data = db.store.get(commit_key(2))
    db.store.delete(commit_key(2))
    db.store.put_if_absent(commit_key(2), data[:-3])
    with pytest.raises(mere.CorruptLog, match="truncated: the last line has no newline"):
        _ = mere.connect(db.store, create=False).version


def test_a_handle_that_read_below_a_damaged_commit_reads_from_a_checkpoint_above_it(
    db: mere.Database,
) -> None:
    """A fresh connection reads past a damaged commit from a later checkpoint; a handle
    whose cached state lay below it replayed through it (CorruptLog for every read of a
    later version, and for writes)."""
    db.create_table("t", pa.schema([("x", pa.int64())]))
    for i in range(3):
        db.table("t").append([{"x": i}])
    db.checkpoint()  # at version 4
    db.table("t").append([{"x": 9}])
    handle = mere.connect(db.store, create=False)
    assert handle.snapshot(1).table("t").scan().num_rows == 0  # cached: version 1
    data = db.store.get(commit_key(2))
    db.store.delete(commit_key(2))
    db.store.put_if_absent(commit_key(2), data[: len(data) // 2])
    assert sorted(handle.table("t").scan().column("x").to_pylist()) == [0, 1, 2, 9]
    assert handle.snapshot(4).table("t").scan().num_rows == 3
    handle.table("t").append([{"x": 10}])
    with pytest.raises(mere.CorruptLog, match=commit_key(2)):
        handle.snapshot(3)  # no checkpoint between the cached state and version 3


@pytest.fixture
def gapped_ahead_of_the_hint(tmp_path: Path) -> mere.Database:
    """A local database whose commit 3 is gone, with the latest-version hint below
    it; returns the client that made version 2 (another one made 3 to 5)."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.table("t").append([{"x": 0}])
    other = mere.connect(db.uri, create=False)
    for i in range(1, LATEST - 1):
        other.table("t").append([{"x": i}])
    assert other.version == LATEST
    db.log.write_latest_hint(GAP - 2)
    db.store.delete(commit_key(GAP))
    return db


def test_discovery_does_not_stop_at_a_gap_that_commits_made_in_turns_passed(
    gapped_ahead_of_the_hint: mere.Database,
) -> None:
    """Probing from a hint below the gap would take it for the end of the log; the
    turns' note (format §8) says later versions were committed, so it is a gap."""
    with pytest.raises(mere.CorruptLog, match=_gap_message()):
        _ = mere.connect(gapped_ahead_of_the_hint.uri, create=False).version


@pytest.mark.parametrize("warm", [True, False], ids=["client-below-the-gap", "new-client"])
def test_a_writer_never_fills_a_gap(gapped_ahead_of_the_hint: mere.Database, warm: bool) -> None:
    """Filling it would put a commit under versions made on another state: the log
    would become unreadable from there, for good (commits are create-only)."""
    db = gapped_ahead_of_the_hint
    with pytest.raises(mere.CorruptLog, match=_gap_message()):
        writer = db if warm else mere.connect(db.uri, create=False)
        writer.table("t").append([{"x": 99}])
    assert not db.store.exists(commit_key(GAP))


def test_a_stale_note_is_no_gap(tmp_path: Path) -> None:
    """A turns file whose note is beyond the log (a copy taken while writers
    went on) makes discovery look further, not fail."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    turns = db.store.turns("_log/")
    assert turns is not None and turns.try_take()
    turns.note(40)
    turns.give_back()
    reader = mere.connect(db.uri, create=False)
    assert reader.version == 1
    reader.table("t").append([{"x": 1}])
    assert reader.version == 2


def test_a_transaction_older_than_a_forced_expiry_cannot_commit_below_it(tmp_path: Path) -> None:
    """Its next version was expired: putting there would succeed (the slot is free)
    and land below the checkpoint every reader starts from, its rows lost."""
    db = mere.connect(str(tmp_path / "db"))
    db.create_table("t", pa.schema([("x", pa.int64())]))
    db.table("t").append([{"x": 1}])
    tx = db.transaction()
    tx.table("t").append([{"x": 2}])
    other = mere.connect(db.uri, create=False)
    for i in range(5):
        other.table("t").append([{"x": 100 + i}])
    other.checkpoint()
    other.expire(timedelta(0), force=True)  # force: "no transaction runs longer"
    with pytest.raises(mere.VersionNotFound, match="expired"):
        tx.commit()
    assert not db.store.exists(commit_key(3))
    assert sorted(other.table("t").scan().column("x").to_pylist()) == [1, 100, 101, 102, 103, 104]
